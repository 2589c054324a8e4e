"""The producer side: kernel sources -> built variants (`build`, `aot`, `cuda`) -> a signed version on a hub (`publish`).

Imports `registry.spec` for the shared vocabulary; never the client or the hub server.
"""
