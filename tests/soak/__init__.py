"""Soak test: randomised legal histories under injected faults, compared with the simulator's truth."""
