"""The parts of scripts/bench, one concern a module."""
