"""The hub server: a Hugging-Face-Hub-compatible HTTP API for `kernel` and `model` repos.

Entry points: `registry.hub.app.create_app(data_dir, public_url)` (the ASGI app) and the
`kernel-hub serve|token|org|key` sub-commands in `registry.hub.commands`. Never imports torch.
"""
