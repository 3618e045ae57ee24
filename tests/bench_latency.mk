# tests/bench_latency.mk: a smoke test of gemmbench-latency against a
# CPU-backend gemmd it starts itself.
TESTS += tests/test_bench_latency.sh
