"""The fault cases of issue 21: each with a stand-in server or profiler (tests/campaign/standins/), the
kit they share in `tests/faultkit.py`. Like every campaign test they check that no process they started
is left (tests/campaign/conftest.py)."""
