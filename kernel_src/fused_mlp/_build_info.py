"""Per-build identity of this package; `kernel-hub build` rewrites this file for every variant.

OPS_NAMESPACE is the `torch.library` namespace of every custom op, so two loaded versions of the
package never register the same `torch.ops.<ns>.<op>`.
"""

OPS_NAMESPACE = "fused_mlp_dev"
BUILD_ID = "dev"
