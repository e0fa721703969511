"""Builds the optional C extension tmakit._native (the per-call host paths); everything else is in pyproject.toml.

The extension is optional: where no C compiler is present the install still succeeds and tmakit runs the Python
twins in tmakit/_hotpath.py (``tmakit info`` says which is in use).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("tmakit._native", ["tmakit/_native.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"])])
