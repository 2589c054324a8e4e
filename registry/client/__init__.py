"""The consumer side: version -> commit and files (`fetch`), which variant fits (`resolve`), verify, import,
check against the eager reference (`check`), else the fallback (`fallback`); `loader.get_kernel` runs it all.

Imports `registry.spec` for the shared vocabulary; never the hub server or the publisher.
"""
