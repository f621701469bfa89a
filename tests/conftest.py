"""For every suite: the property tests' profile (gangsched_testing.properties)."""

from gangsched_testing import properties

properties.load()
