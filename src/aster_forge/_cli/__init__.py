"""Implementation of the ``aster-forge`` command line (see :mod:`aster_forge.cli`)."""
