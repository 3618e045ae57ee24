# tests/bench_clients.mk: a smoke test of `gemmbench clients` against a
# CPU-backend gemmd. The script skips (and passes) where gemmbench is not
# built, i.e. without nvcc.
TESTS += tests/test_bench_clients.sh
