#include "job_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace pgq::cli {
namespace {

namespace fs = std::filesystem;

// A scratch directory of the test's own, removed after it.
class JobFilesTest : public testing::Test {
 protected:
  void SetUp() override {
    parent_ = JobFiles::Create(testing::TempDir().empty() ? "/tmp" : testing::TempDir());
  }
  const std::string& parent() const { return parent_.directory(); }
  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

 private:
  JobFiles parent_;
};

TEST_F(JobFilesTest, PrivateDirectoryWithTheThreeNames) {
  JobFiles files = JobFiles::Create(parent());
  ASSERT_FALSE(files.directory().empty());
  EXPECT_EQ(files.directory().rfind(parent() + "/pgq-worker.", 0), 0u) << files.directory();
  struct stat info;
  ASSERT_EQ(stat(files.directory().c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0700u);  // no other user reads or plants a file
  const auto env = files.Environment();
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0], std::make_pair(std::string("PGQ_RESULT_FILE"), files.result_path()));
  EXPECT_EQ(env[1], std::make_pair(std::string("PGQ_PROGRESS_FILE"), files.progress_path()));
  EXPECT_EQ(env[2], std::make_pair(std::string("PGQ_SNOOZE_FILE"), files.snooze_path()));
  for (const auto& [name, path] : env) {
    EXPECT_EQ(fs::path(path).parent_path(), fs::path(files.directory())) << name;
    EXPECT_FALSE(fs::exists(path)) << name;  // the command writes them, or not
  }
  // Two jobs never share a directory.
  JobFiles other = JobFiles::Create(parent());
  EXPECT_NE(other.directory(), files.directory());
}

TEST_F(JobFilesTest, RemoveTakesWhatTheCommandLeftButNotWhatLinksPointTo) {
  const std::string outside = parent() + "/outside";
  Write(outside, "keep");
  JobFiles files = JobFiles::Create(parent());
  const std::string dir = files.directory();
  Write(files.result_path(), "{}");
  fs::create_directory(dir + "/sub");
  Write(dir + "/sub/x", "x");
  fs::create_symlink(outside, dir + "/link");
  EXPECT_EQ(files.Remove(), "");
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(files.directory().empty());
  EXPECT_TRUE(fs::exists(outside));
  EXPECT_EQ(files.Remove(), "");  // again: nothing to do
}

TEST_F(JobFilesTest, DestructorRemovesAndMoveHandsOver) {
  std::string dir;
  {
    JobFiles files = JobFiles::Create(parent());
    dir = files.directory();
    JobFiles moved = std::move(files);
    EXPECT_TRUE(files.directory().empty());  // NOLINT(bugprone-use-after-move): checked on purpose
    EXPECT_EQ(moved.directory(), dir);
    EXPECT_TRUE(fs::exists(dir));  // the moved-from one removed nothing
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(JobFilesTest, CreateInAMissingParentThrows) {
  EXPECT_THROW(JobFiles::Create(parent() + "/no/such/dir"), std::system_error);
}

TEST_F(JobFilesTest, ReadMissingOrBlankIsNone) {
  EXPECT_EQ(ReadJobFile(parent() + "/missing", 100).status, FileContent::Status::kNone);
  Write(parent() + "/empty", "");
  EXPECT_EQ(ReadJobFile(parent() + "/empty", 100).status, FileContent::Status::kNone);
  Write(parent() + "/blank", " \n\t\r\n");
  EXPECT_EQ(ReadJobFile(parent() + "/blank", 100).status, FileContent::Status::kNone);
}

TEST_F(JobFilesTest, ReadTrimsSurroundingWhitespaceOnly) {
  Write(parent() + "/f", "\n  {\"a\": \"x y\"}\n\n");
  const FileContent content = ReadJobFile(parent() + "/f", 100);
  ASSERT_EQ(content.status, FileContent::Status::kText) << content.error;
  EXPECT_EQ(content.text, "{\"a\": \"x y\"}");
  // Not parsed here: the server decides what is JSON or an interval.
  Write(parent() + "/g", "30 seconds\n");
  EXPECT_EQ(ReadJobFile(parent() + "/g", 100).text, "30 seconds");
  Write(parent() + "/h", "not json");
  EXPECT_EQ(ReadJobFile(parent() + "/h", 100).text, "not json");
}

TEST_F(JobFilesTest, ReadRejectsTooLargeNulFifoAndDirectory) {
  Write(parent() + "/exact", std::string(10, 'x'));
  EXPECT_EQ(ReadJobFile(parent() + "/exact", 10).status, FileContent::Status::kText);
  Write(parent() + "/large", std::string(11, 'x'));
  const FileContent large = ReadJobFile(parent() + "/large", 10);
  EXPECT_EQ(large.status, FileContent::Status::kRejected);
  EXPECT_EQ(large.error, "larger than 10 bytes");
  Write(parent() + "/nul", std::string("{}\0{}", 5));
  const FileContent nul = ReadJobFile(parent() + "/nul", 100);
  EXPECT_EQ(nul.status, FileContent::Status::kRejected);
  EXPECT_EQ(nul.error, "it contains a NUL byte");
  // A FIFO nobody writes to: refused at once, not waited on.
  ASSERT_EQ(mkfifo((parent() + "/fifo").c_str(), 0600), 0);
  const FileContent fifo = ReadJobFile(parent() + "/fifo", 100);
  EXPECT_EQ(fifo.status, FileContent::Status::kRejected);
  EXPECT_EQ(fifo.error, "not a regular file");
  fs::create_directory(parent() + "/dir");
  EXPECT_EQ(ReadJobFile(parent() + "/dir", 100).status, FileContent::Status::kRejected);
}

}  // namespace
}  // namespace pgq::cli
