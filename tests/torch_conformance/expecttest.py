"""Minimal stand-in for the PyPI package `expecttest` (not packaged by Debian).

torch.testing._internal.common_utils only needs:
  * ``expecttest.ACCEPT``   -- module flag, read and set from ``--accept``
  * ``expecttest.TestCase`` -- base class of common_utils.TestCase

The real package rewrites the calling source file when ACCEPT is set; this
stand-in never writes anything and simply compares (after the same dedent /
strip the real one does), which is all the distributed suite needs.
"""

import os
import textwrap
import unittest

ACCEPT = bool(os.getenv("EXPECTTEST_ACCEPT"))


def _normalize(s):
    # The real expecttest strips the common indentation of triple-quoted
    # literals and a leading newline.
    s = textwrap.dedent(s)
    if s.startswith("\n"):
        s = s[1:]
    return s


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertMultiLineEqual(_normalize(expect), actual)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        try:
            callable(*args, **kwargs)
        except exc_type as e:
            self.assertExpectedInline(str(e), expect, skip=1)
            return
        self.fail(msg="Did not raise when expected to")
