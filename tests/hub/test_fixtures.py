"""The shared `hub`/`hub_env` fixtures start a real server that the stock client reaches."""

from huggingface_hub import HfApi


def test_hub_env_points_the_stock_client_at_the_hub(hub, hub_env):
    api = HfApi(token=hub.token("fixture-user"))
    url = api.create_repo("fixture-user/probe", repo_type="kernel")
    assert str(url).startswith(hub.url + "/kernels/fixture-user/probe")
    assert api.repo_exists("fixture-user/probe", repo_type="kernel")
    assert not api.repo_exists("fixture-user/absent", repo_type="kernel")
