"""The package's C extensions, optional: without a C compiler (or Python's headers)
``pip install`` goes on without them and dmq.record.check and dmq.protocol.bounds use
their Python walks."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dmq.record._recordcheck", ["dmq/record/_recordcheck.c"], optional=True),
                   Extension("dmq.protocol._bounds", ["dmq/protocol/_bounds.c"], optional=True)])
