"""The one compiled part: the load client's receive path (specmon/load/_fastread.c).

Optional: where it does not build (no C compiler, not Linux) the install goes on and the client
reads through its Python path (specmon/load/client.py): the same requests and stamps, paced by
the same rule (load/pacing.py), at more CPU per chunk. A failed build is said, loudly, on
stderr (pip shows it with -v), and each ramp level's load_client figures in session.json name
the reader that ran it ("reader": "C" or "Python")."""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the C reader; on failure say so in a block that cannot be missed, and go on."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any failure to compile leaves the Python reader
            self._failed(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._failed(e)

    @staticmethod
    def _failed(e: Exception) -> None:
        bar = "!" * 78
        print(f"\n{bar}\nspecmon: the C reader (specmon/load/_fastread.c) did not build: {e}\n"
              "specmon: the load client will read in Python: the same requests and stamps, more CPU per\n"
              "specmon: chunk (see docs/performance.md). Install a C compiler and reinstall to build it.\n"
              f"{bar}\n", file=sys.stderr, flush=True)


setup(ext_modules=[Extension("specmon.load._fastread", ["specmon/load/_fastread.c"],
                             extra_compile_args=["-O2", "-std=c11"])],
      cmdclass={"build_ext": OptionalBuildExt})
