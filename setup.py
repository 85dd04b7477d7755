"""The one compiled part: the load client's receive path (specmon/load/_fastread.c).

Optional: where it does not build (no C compiler, not Linux) the install goes on and the client
reads through its Python path (specmon/load/client.py), the same figures at more CPU per chunk."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("specmon.load._fastread", ["specmon/load/_fastread.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c11"])])
