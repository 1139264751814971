"""Every test runs under the reference session (tests/support/reference_session.py); the helpers the tests import
are in tests/support/ too."""

pytest_plugins = ("reference_session",)
