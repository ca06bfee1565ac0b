"""Packaging metadata (issue 8): META.json is a valid PGXN distribution
description (the required fields of https://pgxn.org/meta/spec.txt, with
their formats), and the version is one: pgq_cpp.control's default_version,
which META.json and CHANGELOG.md's first entry repeat. No database needed."""
import json
import os
import re
import unittest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
LICENSES = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd",
            "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit",
            "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5", "postgresql", "qpl_1_0",
            "ssleay", "sun", "zlib", "open_source", "restricted", "unrestricted", "unknown"}


def read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


class MetaTest(unittest.TestCase):
    def setUp(self):
        self.meta = json.loads(read("META.json"))
        self.version = re.search(r"^default_version\s*=\s*'([^']+)'", read("pgq_cpp.control"),
                                 re.M).group(1)

    def test_meta_json_has_the_fields_pgxn_requires(self):
        m = self.meta
        for field in ("name", "abstract", "version", "maintainer", "license", "provides",
                      "meta-spec"):
            self.assertIn(field, m)
        self.assertRegex(m["name"], r"^[A-Za-z][A-Za-z0-9_-]+$")
        self.assertRegex(m["version"], SEMVER)
        self.assertEqual(m["meta-spec"]["version"], "1.0.0")
        self.assertIn(m["license"], LICENSES)
        self.assertTrue(m["maintainer"])
        self.assertIn(m.get("release_status", "stable"), {"stable", "testing", "unstable"})
        for ext, p in m["provides"].items():
            self.assertRegex(p["version"], SEMVER, ext)
            for key in ("file", "docfile"):
                if key in p:
                    self.assertTrue(os.path.exists(os.path.join(ROOT, p[key])), p[key])
        for phase in m.get("prereqs", {}).values():
            for relation in phase.values():
                for version in relation.values():
                    self.assertRegex(version, SEMVER)

    def test_the_version_is_the_control_files_everywhere(self):
        semver = self.version + ".0" if self.version.count(".") == 1 else self.version
        self.assertEqual(self.meta["version"], semver)
        self.assertEqual(self.meta["provides"]["pgq_cpp"]["version"], semver)
        first = re.search(r"^## (\S+)", read("CHANGELOG.md"), re.M).group(1)
        self.assertEqual(first, self.version)
        # The version has its ways in: a full install script (what CREATE
        # EXTENSION runs, ADR 0024) and an update script reaching it.
        scripts = os.listdir(os.path.join(ROOT, "sql"))
        self.assertIn(f"pgq_cpp--{self.version}.sql", scripts)
        self.assertTrue(self.version == "1.0" or
                        any(s.endswith(f"--{self.version}.sql") and s.count("--") == 2
                            for s in scripts), scripts)
        # META.json names the full install script.
        self.assertEqual(self.meta["provides"]["pgq_cpp"]["file"], f"sql/pgq_cpp--{self.version}.sql")
