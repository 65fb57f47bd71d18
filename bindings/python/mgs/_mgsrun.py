"""The `mgsrun` command of the pip package: runs the launcher binary shipped inside it."""

import os
import sys
from pathlib import Path


def main():
    binary = Path(__file__).resolve().parent / "bin" / "mgsrun"
    if not binary.exists():
        sys.exit(f"mgsrun: error: {binary} is missing; this mgs package was built without the launcher "
                 "(reinstall it from a build tree that has build/launcher/mgsrun)")
    os.execv(str(binary), [str(binary)] + sys.argv[1:])


if __name__ == "__main__":
    main()
