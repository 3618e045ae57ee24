"""The manual pages name every option that --help lists."""

import os
import re
import subprocess
import unittest

from daemon_util import BIN, ROOT

PAGES = {
    "gemmd": ("man/gemmd.8", [["--help"]]),
    "gemmctl": ("man/gemmctl.1", [["--help"], ["plan", "--help"]]),
}


class TestManPages(unittest.TestCase):
    def test_every_option_is_documented(self):
        for prog, (page, helps) in PAGES.items():
            exe = os.path.join(BIN, prog)
            if not os.access(exe, os.X_OK):
                self.skipTest("build/%s is not built" % prog)
            with open(os.path.join(ROOT, page)) as f:
                text = f.read().replace("\\-", "-")
            for args in helps:
                out = subprocess.run([exe] + args, capture_output=True, text=True).stdout
                flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out))
                self.assertTrue(flags, "%s %s printed no options" % (prog, " ".join(args)))
                for flag in sorted(flags):
                    self.assertIn(flag, text, "%s: %s is not in %s" % (prog, flag, page))


if __name__ == "__main__":
    unittest.main()
