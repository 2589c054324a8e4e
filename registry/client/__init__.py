"""The consumer side: version -> commit and files (`fetch`), which variant fits (`resolve`),
plan a load (`plan`), verify (`verify`), import (`importer`), check and time (`gates`), else the
fallback (`fallback`); `loader.get_kernel` runs that sequence.

Imports `registry.spec` for the shared vocabulary; never the hub server or the publisher.
"""
