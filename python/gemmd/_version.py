# The package's version: the Makefile's VERSION (python/tests checks that
# they are equal). The build backend reads it from this line.
__version__ = "0.1.0"
