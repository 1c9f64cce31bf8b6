"""Shim so that old pip versions can do editable installs; metadata lives in setup.cfg."""

from setuptools import setup

setup()
