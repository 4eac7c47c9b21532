"""The set-based actor-critic (agents.models.set_policy): permutation property, masks, saving and safe
loading, the residual start, ``--policy-arch set`` end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from builders import REPO

sys.path.insert(0, str(REPO))  # train_policy.py is a script at the repository root

import train_policy  # noqa: E402
from agents.errors import ConfigError  # noqa: E402
from agents.trainers.ppo import build_model, make_vec_env_for  # noqa: E402
from deepboot_env.env.observation import JOB_FEATURES  # noqa: E402
from deepboot_env.sim.apps import APP_NAMES  # noqa: E402
from traces.generate import generate_workload, write_workload_csv  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

SLOTS = 8
SMALL = {"embed_dim": 32, "attention_heads": 4, "attention_layers": 1}


@pytest.fixture(scope="module")
def tiny_csv(tmp_path_factory) -> Path:
    wl = generate_workload("tiny", 2, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})
    return write_workload_csv(wl, tmp_path_factory.mktemp("wl") / "tiny.csv")


def _model(algo: str, tiny_csv: Path, action_mode: str = "target", **kwargs: int):
    env = make_vec_env_for(str(tiny_csv), 1, 0, {"max_jobs": SLOTS, "action_mode": action_mode})
    hyper = {"policy": "SetPolicy", "n_steps": 64, "batch_size": 64, "policy_kwargs": {**SMALL, **kwargs}}
    return build_model(algo, env, seed=1, hyperparams=hyper)


def _busy_observation(model) -> dict[str, np.ndarray]:
    """An observation with several present jobs (no GPUs given until 4+ jobs are active)."""
    env = model.get_env()
    obs = env.reset()
    for _ in range(400):
        if obs["jobs"].reshape(SLOTS, len(JOB_FEATURES))[:, 0].sum() >= 4:
            return obs
        masks = np.stack(env.env_method("action_masks"))
        action = np.array([[int(np.flatnonzero(m)[0]) for m in _split(masks[0], model)]])
        obs, *_ = env.step(action)
    raise AssertionError("never saw 4 active jobs")


def _split(mask: np.ndarray, model) -> list[np.ndarray]:
    return np.split(mask, np.cumsum(model.action_space.nvec)[:-1])


def _permute(obs: dict[str, np.ndarray], order: np.ndarray) -> dict[str, np.ndarray]:
    out = dict(obs)
    out["jobs"] = obs["jobs"].reshape(1, SLOTS, -1)[:, order].reshape(1, -1)
    if "base" in obs:
        out["base"] = obs["base"][:, order]
    return out


def _logits_and_value(model, obs: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    import torch

    with torch.no_grad():
        tensor, _ = model.policy.obs_to_tensor(obs)
        features = model.policy.extract_features(tensor, model.policy.pi_features_extractor)
        logits = model.policy.action_net(model.policy.mlp_extractor.forward_actor(features))[0].numpy()
        value = float(model.policy.predict_values(tensor)[0, 0])
    return logits, value


POOLED = {"attention_layers": 0, "pool_layers": 1}
"""The set network with a pooled-context block in place of attention."""


@pytest.mark.parametrize(
    ("algo", "mode", "sizes"), [("maskable_ppo", "target", {}), ("ppo", "residual", {}), ("ppo", "target", POOLED)]
)
def test_permuting_jobs_permutes_the_actions_and_keeps_the_value(algo, mode, sizes, tiny_csv) -> None:
    model = _model(algo, tiny_csv, action_mode=mode, **sizes)
    obs = _busy_observation(model)
    order = np.random.default_rng(5).permutation(SLOTS)
    assert not np.array_equal(order, np.arange(SLOTS))
    logits, value = _logits_and_value(model, obs)
    moved, moved_value = _logits_and_value(model, _permute(obs, order))
    k = int(model.action_space.nvec[0])
    per_slot = logits[: SLOTS * k].reshape(SLOTS, k)
    # the distribution is over normalised logits: compare log-probabilities
    log_p = per_slot - np.logaddexp.reduce(per_slot, axis=1, keepdims=True)
    moved_log_p = moved[: SLOTS * k].reshape(SLOTS, k)
    moved_log_p = moved_log_p - np.logaddexp.reduce(moved_log_p, axis=1, keepdims=True)
    np.testing.assert_allclose(moved_log_p, log_p[order], atol=1e-5)
    np.testing.assert_allclose(moved[SLOTS * k :], logits[SLOTS * k :], atol=1e-5)
    assert moved_value == pytest.approx(value, abs=1e-5)
    # and the network is not blind to the jobs: another observation changes the value
    other = dict(obs)
    other["jobs"] = np.zeros_like(obs["jobs"])
    assert _logits_and_value(model, other)[1] != pytest.approx(value, abs=1e-6)


def test_no_jobs_gives_finite_outputs_and_masks_hold(tiny_csv) -> None:
    import torch

    model = _model("maskable_ppo", tiny_csv)
    env = model.get_env()
    obs = env.reset()
    empty = {k: np.zeros_like(v) for k, v in obs.items()}
    logits, value = _logits_and_value(model, empty)
    assert np.isfinite(logits).all() and np.isfinite(value)
    obs = _busy_observation(model)
    masks = np.stack(env.env_method("action_masks"))
    for _ in range(20):
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert all(m[a] for m, a in zip(_split(masks[0], model), action[0], strict=True))
    with torch.no_grad():
        assert all(torch.isfinite(p).all() for p in model.policy.parameters())


def test_saved_set_policy_loads_safely_and_predicts_the_same(tiny_csv, tmp_path) -> None:
    from agents.models.set_policy import MaskableSetActorCriticPolicy
    from agents.saved.checkpoint import load_checkpoint

    model = _model("maskable_ppo", tiny_csv, attention_layers=2, pool_layers=1)
    model.learn(64)
    path = tmp_path / "set.zip"
    model.save(path)
    loaded = load_checkpoint(path)  # no unpickling: the class is rebuilt from its plain-text module
    assert type(loaded.policy) is MaskableSetActorCriticPolicy
    network = loaded.policy.mlp_extractor
    assert (len(network.blocks), len(network.pools), network.latent_dim_vf) == (2, 1, 32)
    obs = _busy_observation(model)
    np.testing.assert_allclose(_logits_and_value(loaded, obs)[0], _logits_and_value(model, obs)[0], atol=1e-6)


def test_residual_start_reproduces_the_base_policy(tiny_csv) -> None:
    from agents.trainers.imitation import init_residual_policy
    from deepboot_env.env.action import NEUTRAL

    model = _model("ppo", tiny_csv, action_mode="residual")
    neutral = np.array([NEUTRAL] * SLOTS + [int(model.action_space.nvec[-1]) - 1])
    init_residual_policy(model, neutral, 0.9)
    obs = _busy_observation(model)
    action, _ = model.predict(obs, deterministic=True)
    np.testing.assert_array_equal(action[0], neutral)
    logits, _ = _logits_and_value(model, obs)
    first = logits[: int(model.action_space.nvec[0])]  # slot 0's choices
    p = np.exp(first - np.logaddexp.reduce(first))
    assert p[NEUTRAL] == pytest.approx(0.9, abs=1e-5)


@pytest.mark.parametrize(
    ("hyper", "message"),
    [
        ({"policy": "SetPolicy", "policy_kwargs": {"net_arch": [64]}}, "net_arch is for --policy-arch mlp"),
        ({"policy_kwargs": {"embed_dim": 32}}, "embed_dim is for --policy-arch set"),
        ({"policy": "SetPolicy", "policy_kwargs": {"embed_dim": 30}}, "multiple of attention_heads"),
        ({"policy": "SetPolicy", "policy_kwargs": {"attention_layers": -1}}, "attention_layers must be"),
        ({"policy": "SetPolicy", "policy_kwargs": {"pool_layers": 1.5}}, "pool_layers must be"),
        ({"policy": "SetPolicy", "policy_kwargs": {"application_scores": 3}}, "application_scores must be 0, 1 or 2"),
        ({"policy": "GraphPolicy"}, "unknown policy 'GraphPolicy'"),
    ],
)
def test_bad_set_policy_settings_are_config_errors(hyper, message, tiny_csv) -> None:
    env = make_vec_env_for(str(tiny_csv), 1, 0, {"max_jobs": SLOTS})
    with pytest.raises(ConfigError, match=message):
        build_model("ppo", env, hyperparams=hyper)


def test_policy_arch_set_trains_resumes_and_runs_as_a_policy(tiny_csv, tmp_path) -> None:
    from deepboot_env.evaluation import run_episode
    from deepboot_env.policy import make_policy
    from traces.loaders import load_workload

    common = ["--preset", "smoke", "--workload", str(tiny_csv), "--eval-workload", str(tiny_csv)]
    common += ["--log-folder", str(tmp_path), "--no-progress", "--verbose", "0"]
    # one attention block: the smoke preset's 1,024 steps leave a target-mode policy at its start, whose
    # deterministic targets hold GPUs with this network (with the pooled one of the default, none)
    sizes = "policy_kwargs:dict(attention_layers=1,pool_layers=0)"
    run = train_policy.run(["--algo", "maskable_ppo", "--policy-arch", "set", "-n", "1024", "-params", sizes, *common])
    import yaml

    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["hyperparams"]["policy"] == "SetPolicy"
    assert "net_arch" not in config["hyperparams"]["policy_kwargs"]  # the preset's MLP sizes are dropped
    policy = make_policy(f"ppo:{run / 'final_model.zip'}")
    metrics = run_episode(policy, load_workload(tiny_csv))
    assert metrics.train_jct_mean > 0
    resumed = train_policy.run(["-i", str(run / "final_model.zip"), "-n", "256", "--eval-freq", "0", *common])
    assert (resumed / "final_model.zip").is_file()
    with pytest.raises(SystemExit):
        train_policy.main(["-i", str(run / "final_model.zip"), "--policy-arch", "mlp", *common])


def _padded_reference(network, features):
    """The set network computed the plain way, over all slots padded (nn.MultiheadAttention with
    a key padding mask): the present jobs' logits, the lending logits and the critic's latent."""
    import torch

    batch = features.shape[0]
    rows = torch.cat([features[:, o : o + s].reshape(batch, network.slots, w) for o, s, w in network.slot_parts], dim=2)
    present = rows[:, :, 0] > 0.5
    h = network.job_encoder(rows)
    for block in network.blocks:
        y = block.norm1(h)
        h = h + block.attention(y, y, y, key_padding_mask=~present, need_weights=False)[0]
        h = h + block.feed_forward(block.norm2(h))
    weight = present.unsqueeze(2).float()

    def masked_mean(rows):
        return (rows * weight).sum(1) / weight.sum(1).clamp(min=1.0)

    for pool in network.pools:
        x = pool.norm(h)
        h = h + pool.out(pool.act(pool.own(x) + pool.pooled(masked_mean(x)).unsqueeze(1)))
    mean = masked_mean(h)
    peak = h.masked_fill(~present.unsqueeze(2), -1e9).max(1).values
    peak = torch.where(present.any(1, keepdim=True), peak, torch.zeros_like(peak))
    glob = torch.cat([features[:, o : o + s] for o, s in network.global_parts], dim=1)
    summary = network.summary(torch.cat([mean, peak, network.global_encoder(glob)], dim=1))
    expanded = summary.unsqueeze(1).expand(-1, network.slots, -1)
    per_slot = network.slot_head(torch.cat([h, expanded], dim=2))
    return per_slot[present], network.lend_head(summary), network.value_head(summary), present


@pytest.mark.parametrize(("layers", "pools"), [(0, 0), (1, 0), (2, 0), (0, 1), (1, 2)])
def test_packed_jobs_compute_what_the_padded_network_computes(layers, pools, tiny_csv) -> None:
    """The network runs its per-job layers on the present jobs only (packed); on jobs scattered
    over the slots it gives the padded computation's logits and value, and an empty slot's
    logits depend on the summary alone."""
    import torch

    model = _model("ppo", tiny_csv, attention_layers=layers, pool_layers=pools)
    network = model.policy.mlp_extractor
    obs = _busy_observation(model)
    rng = np.random.default_rng(3)
    batch = [_permute(obs, rng.permutation(SLOTS)) for _ in range(5)]
    for observation in batch:  # a summary of its own for every observation
        observation["cluster"] = rng.uniform(size=obs["cluster"].shape).astype(np.float32)
    with torch.no_grad():
        features = torch.cat([model.policy.extract_features(model.policy.obs_to_tensor(o)[0]) for o in batch])
        features = torch.cat([features, torch.zeros_like(features[:1])])  # and a state without jobs
        logits, latent_vf = network(features)
        want_jobs, want_lend, want_vf, present = _padded_reference(network, features)
    k = network.slot_choices
    per_slot = logits[:, : SLOTS * k].reshape(-1, SLOTS, k)
    assert int(present.sum()) == 5 * int(present[0].sum()) >= 20
    torch.testing.assert_close(per_slot[present], want_jobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[:, SLOTS * k :], want_lend, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(latent_vf, want_vf, atol=1e-5, rtol=1e-5)
    empty = per_slot[~present].reshape(-1, k)
    assert torch.isfinite(logits).all() and len(empty) > SLOTS
    for row in range(len(batch)):  # every empty slot of one observation holds the same logits
        empty_rows = per_slot[row][~present[row]]
        torch.testing.assert_close(empty_rows, empty_rows[:1].expand_as(empty_rows))


@pytest.mark.parametrize(("layers", "pools"), [(0, 0), (1, 0), (0, 1)])
def test_the_update_computes_the_rollout_outputs_and_the_padded_gradients(layers, pools, tiny_csv) -> None:
    """The max pooling's own backward (``_SegmentPeak``): with the gradient on, the network
    gives the outputs it gives without, and the padded computation's gradients of every weight,
    over states of unequal job counts and one without jobs."""
    import torch

    model = _model("ppo", tiny_csv, attention_layers=layers, pool_layers=pools)
    network = model.policy.mlp_extractor
    obs = _busy_observation(model)
    rng = np.random.default_rng(7)
    batch = []
    for keep in (1, 3, SLOTS, 0):
        observation = _permute(obs, rng.permutation(SLOTS))
        kept = observation["jobs"].reshape(SLOTS, -1).copy()
        kept[np.flatnonzero(kept[:, 0] > 0.5)[keep:]] = 0.0
        observation["jobs"] = kept.reshape(1, -1)
        observation["cluster"] = rng.uniform(size=obs["cluster"].shape).astype(np.float32)
        batch.append(observation)
    features = torch.cat([model.policy.extract_features(model.policy.obs_to_tensor(o)[0]) for o in batch])
    weights = [p for p in network.parameters() if p.requires_grad]

    def gradients(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
        loss = sum((out * torch.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)).sum() for out in outputs)
        grads = torch.autograd.grad(loss, weights, allow_unused=True)
        return [g if g is not None else torch.zeros_like(p) for p, g in zip(weights, grads, strict=True)]

    logits, latent_vf = network(features)
    with torch.no_grad():
        rollout_logits, rollout_vf = network(features)
    torch.testing.assert_close(logits, rollout_logits, atol=0.0, rtol=0.0)
    torch.testing.assert_close(latent_vf, rollout_vf, atol=0.0, rtol=0.0)
    want_jobs, want_lend, want_vf, present = _padded_reference(network, features)
    assert present.sum(dim=1).tolist()[-1] == 0 and len(set(present.sum(dim=1).tolist())) == 4
    k = network.slot_choices
    got = [logits[:, : SLOTS * k].reshape(-1, SLOTS, k)[present], logits[:, SLOTS * k :], latent_vf]
    for mine, theirs in zip(gradients(got), gradients([want_jobs, want_lend, want_vf]), strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("layers", [1, 2])
def test_jobs_of_unequal_counts_attend_within_their_state_with_finite_gradients(layers, tiny_csv) -> None:
    """Attention runs on a compact layout as wide as the batch's largest state: states of 1, 2,
    3 and all their jobs (and one without jobs) give the padded computation's outputs, and the
    gradient of everything stays finite (a state without jobs must not put NaN in it)."""
    import torch

    model = _model("ppo", tiny_csv, attention_layers=layers)
    network = model.policy.mlp_extractor
    obs = _busy_observation(model)
    rows = obs["jobs"].reshape(SLOTS, -1)
    busy = np.flatnonzero(rows[:, 0] > 0.5)
    rng = np.random.default_rng(5)
    batch = []
    for keep in (1, 2, 3, len(busy), 0):
        observation = _permute(obs, rng.permutation(SLOTS))
        kept = observation["jobs"].reshape(SLOTS, -1).copy()
        for slot in np.flatnonzero(kept[:, 0] > 0.5)[keep:]:
            kept[slot] = 0.0
        observation["jobs"] = kept.reshape(1, -1)
        batch.append(observation)
    features = torch.cat([model.policy.extract_features(model.policy.obs_to_tensor(o)[0]) for o in batch])
    logits, latent_vf = network(features)
    with torch.no_grad():
        want_jobs, want_lend, want_vf, present = _padded_reference(network, features)
    assert present.sum(dim=1).tolist() == [1, 2, 3, len(busy), 0]
    per_slot = logits[:, : SLOTS * network.slot_choices].reshape(-1, SLOTS, network.slot_choices)
    torch.testing.assert_close(per_slot[present], want_jobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[:, SLOTS * network.slot_choices :], want_lend, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(latent_vf, want_vf, atol=1e-5, rtol=1e-5)
    (logits.sum() + latent_vf.sum()).backward()
    grads = [p.grad for p in network.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(float(g.abs().sum()) > 0 for g in (b.attention.in_proj_weight.grad for b in network.blocks))


def test_application_scores_give_each_application_one_score_in_every_state(tiny_csv, tmp_path) -> None:
    """With ``application_scores: 1`` a present job's score mean is its application's row of a
    table (whatever the state, the slot or the other jobs), starting at exactly 0 (the prior);
    the setting survives a save and load."""
    import torch

    from agents.saved.checkpoint import load_checkpoint

    model = _model("ppo", tiny_csv, action_mode="score", application_scores=1)
    network = model.policy.mlp_extractor
    table = network.application_table
    assert table is not None and not table.weight.any()
    with torch.no_grad():
        table.weight.copy_(torch.arange(1.0, len(APP_NAMES) + 1).unsqueeze(0))
    env = model.get_env()
    obs = env.reset()
    seen: dict[int, set[float]] = {}
    for _ in range(60):
        logits, _ = _logits_and_value(model, obs)
        rows = obs["jobs"].reshape(SLOTS, len(JOB_FEATURES))
        for slot in np.flatnonzero(rows[:, 0] > 0.5):
            app = int(np.argmax(rows[slot, 1 : 1 + len(APP_NAMES)]))
            seen.setdefault(app, set()).add(round(float(logits[slot]), 5))
        obs, *_ = env.step(np.zeros((1, SLOTS + 1), dtype=np.float32))
    assert len(seen) >= 2 and all(values == {float(app + 1)} for app, values in seen.items())
    model.save(tmp_path / "table.zip")
    loaded = load_checkpoint(tmp_path / "table.zip")
    assert loaded.policy.mlp_extractor.application_table is not None
    np.testing.assert_allclose(_logits_and_value(loaded, obs)[0], _logits_and_value(model, obs)[0], atol=1e-6)


def test_state_scores_are_per_job_and_permutation_equivariant(tiny_csv) -> None:
    """With ``application_scores: 2`` a present job's score mean is its application's row plus a
    linear function of its own features: it moves with the job's state, the slots' order only
    permutes it, and the lending output and the value do not move."""
    import torch

    model = _model("ppo", tiny_csv, action_mode="score", application_scores=2)
    network = model.policy.mlp_extractor
    assert network.state_scores is not None and not network.state_scores.weight.any()
    with torch.no_grad():
        network.application_table.weight.normal_(generator=torch.Generator().manual_seed(1))
        network.state_scores.weight.normal_(generator=torch.Generator().manual_seed(2))
    env = model.get_env()
    obs = env.reset()
    for _ in range(400):
        if obs["jobs"].reshape(SLOTS, len(JOB_FEATURES))[:, 0].sum() >= 3:
            break
        obs, *_ = env.step(np.zeros((1, model.action_space.shape[0]), dtype=np.float32))
    rows = obs["jobs"].reshape(SLOTS, len(JOB_FEATURES))
    present = np.flatnonzero(rows[:, 0] > 0.5)
    assert len(present) >= 3
    logits, value = _logits_and_value(model, obs)
    scores = logits[:SLOTS]
    apps = rows[present, 1 : 1 + len(APP_NAMES)].argmax(axis=1)
    table = network.application_table
    weight, bias = table.weight.detach().numpy(), table.bias.detach().numpy()
    state = np.concatenate([rows[present, 1 + len(APP_NAMES) :], obs["prior"][0, present, None]], axis=1)
    expected = weight[0, apps] + bias[0] + state @ network.state_scores.weight.detach().numpy()[0]
    np.testing.assert_allclose(scores[present], expected, atol=1e-5)
    order = np.random.default_rng(5).permutation(SLOTS)
    moved = dict(obs)
    moved["jobs"] = obs["jobs"].reshape(1, SLOTS, -1)[:, order].reshape(1, -1)
    moved["prior"] = obs["prior"][:, order]
    moved_logits, moved_value = _logits_and_value(model, moved)
    np.testing.assert_allclose(moved_logits[:SLOTS], scores[order], atol=1e-5)
    np.testing.assert_allclose(moved_logits[-1], logits[-1], atol=1e-5)
    assert moved_value == pytest.approx(value, abs=1e-5)
    # made state-independent, the state scores go too: every slot's score is the bias
    model.policy.set_state_independent(np.array([0.25] * SLOTS + [-0.5]))
    np.testing.assert_allclose(_logits_and_value(model, obs)[0], [0.25] * SLOTS + [-0.5], atol=1e-6)


def test_a_checkpoint_names_its_sizes_and_an_older_one_loads_with_the_sizes_of_its_time(tiny_csv, tmp_path) -> None:
    """A model is built with every set size named, so its file keeps them; a file from before the
    pooled-context blocks, which names neither ``attention_layers`` nor ``pool_layers``, loads
    with one attention block and no pooled one (the network its weights are), not today's
    defaults."""
    import json
    import zipfile

    from agents.hyperparameters import SET_POLICY_KWARGS
    from agents.saved.checkpoint import load_checkpoint

    model = _model("ppo", tiny_csv, attention_layers=1, pool_layers=0)
    path = tmp_path / "sized.zip"
    model.save(path)
    saved = json.loads(zipfile.ZipFile(path).read("data"))["policy_kwargs"]
    assert set(SET_POLICY_KWARGS) <= set(saved)
    fresh = _model("ppo", tiny_csv)
    fresh_path = tmp_path / "default.zip"
    fresh.save(fresh_path)
    defaults = json.loads(zipfile.ZipFile(fresh_path).read("data"))["policy_kwargs"]
    assert {k: defaults[k] for k in SET_POLICY_KWARGS} == {**SET_POLICY_KWARGS, **SMALL}
    older = tmp_path / "older.zip"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(older, "w") as target:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename == "data":
                data = json.loads(content)
                for key in ("attention_layers", "pool_layers"):
                    del data["policy_kwargs"][key]
                content = json.dumps(data).encode()
            target.writestr(item, content)
    loaded = load_checkpoint(older)
    network = loaded.policy.mlp_extractor
    assert (len(network.blocks), len(network.pools)) == (1, 0)
    obs = _busy_observation(model)
    np.testing.assert_allclose(_logits_and_value(loaded, obs)[0], _logits_and_value(model, obs)[0], atol=1e-6)
