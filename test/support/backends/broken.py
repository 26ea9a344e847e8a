"""A backend module whose import fails, as a plug-in with a missing dependency does."""

import a_dependency_that_is_not_installed  # noqa: F401
