#!/usr/bin/env python3
"""Prints a pytest JUnit XML file's counts ("38 passed, 26 skipped, 0 failed")
and the reasons of the skips; exits 1 if any test failed or the file is missing.
Usage: python3 scripts/pytest_counts.py pytest.xml"""
import collections
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    print(f"no pytest results: {e}")
    sys.exit(1)
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
reasons = collections.Counter(
    sk.get("message", "") for sk in root.iter("skipped"))
skipped = sum(reasons.values())
print(f"pytest: {total - failed - skipped} passed, {skipped} skipped, {failed} failed"
      + "".join(f"; {n} skipped: {r}" for r, n in sorted(reasons.items())))
sys.exit(1 if failed or total == 0 else 0)
