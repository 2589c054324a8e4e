"""The shared vocabulary of kernel-hub: one home for every rule that producer, hub and client must agree on.

`arch` (GPU arch notation, SASS/PTX compatibility), `names` (repo type, version branches, commit ids),
`variant` (metadata.json as a typed dataclass), `build_matrix` (build/matrix.toml, read once),
`digest` (which files a variant's digest covers, and how), `signing` (metadata.json signatures) and
`presets` (the real-model shape suite that benchmarks and speed checks time).
Submodules import only the standard library and (`signing`) `cryptography`: the hub server uses them too.
"""
