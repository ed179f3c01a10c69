"""The package's one C extension, optional: without a C compiler (or Python's headers)
``pip install`` goes on without it and dmq.record.check uses its Python walk."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dmq.record._recordcheck", ["dmq/record/_recordcheck.c"], optional=True)])
