"""Configuration: presets, YAML files, `--set` overrides, and one-line errors naming the dotted key."""

from __future__ import annotations

import pytest
import yaml
from pydantic import BaseModel

from whale.core.config import PRESETS, Config, ConfigError, config_from_dict, load_config


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESETS.glob("*.yaml")))
def test_every_preset_loads_and_sets_what_its_file_says(preset):
    cfg = load_config(preset)
    assert isinstance(cfg, Config)
    raw = yaml.safe_load((PRESETS / f"{preset}.yaml").read_text())
    assert cfg.name == raw["name"]
    for section, values in raw.items():
        if isinstance(values, dict):
            for key, value in values.items():
                actual = getattr(getattr(cfg, section), key)
                if isinstance(actual, BaseModel):  # a nested section (engine.vllm): the keys the file sets
                    actual = {k: v for k, v in actual.model_dump().items() if k in value}
                assert actual == value, f"{section}.{key}"


def test_presets_include_default_and_tiny():
    tiny, default = load_config("tiny"), load_config()
    assert tiny.model.name == "tiny" and tiny.schedule.budget_rollouts == 60
    assert default.name == "default" and default.model.name == "embedded"


def test_unknown_key_names_the_dotted_path():
    with pytest.raises(ConfigError, match=r"unknown key 'rft\.kk'"):
        load_config("tiny", overrides=["rft.kk=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'colour'"):
        load_config("tiny", overrides=["colour=red"])


def test_unknown_key_in_a_file_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nschedule:\n  weight_steps: 2\n  budgett_rollouts: 10\n")
    with pytest.raises(ConfigError) as info:
        load_config(path=path)
    message = str(info.value)
    assert str(path) in message and "schedule.budgett_rollouts" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("rft.k=-1", "rft.k"),
        ("rft.k=many", "rft.k"),
        ("sampling.top_p=0", "sampling.top_p"),
        ("search.alpha=1.5", "search.alpha"),
        ("schedule.start=middle", "schedule.start"),
        ("runner.memory_mb=8", "runner.memory_mb"),
        ("model=3", "model"),
        ("weights.algorithm=ppo", "weights.algorithm"),
        ("weights.grpo_clip=1.5", "weights.grpo_clip"),
        ("weights.dpo_beta=0", "weights.dpo_beta"),
    ],
)
def test_bad_value_names_the_key_and_the_value(override, key):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", overrides=[override])
    message = str(info.value)
    assert f": {key}: " in message and "(with --set)" in message
    assert repr(yaml.safe_load(override.split("=", 1)[1])) in message
    assert "\n" not in message


def test_missing_file_unknown_preset_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load_config(path=tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"unknown preset 'huge' \(available: .*tiny"):
        load_config("huge")
    with pytest.raises(ConfigError, match="either --preset or --config"):
        load_config("tiny", path=tmp_path / "x.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrft: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_config(path=bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(path=listy)


def test_empty_file_gives_defaults(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(path=empty) == Config()


def test_set_overrides_parse_yaml_scalars():
    cfg = load_config(
        "tiny",
        overrides=[
            "sampling.temperature=0.25",
            "weights.lora=false",
            "rft.k=3",
            "name=my run",
            "domain.sizes={train: 5, search: 2, val: 2, test: 2}",
            "domain.options.levels.train=[1, 2]",
            "domain.harness=null",
            " schedule.budget_rollouts = 99",
        ],
    )
    assert cfg.sampling.temperature == 0.25
    assert cfg.weights.lora is False
    assert cfg.rft.k == 3 and cfg.rft.tasks_per_step == 4  # the rest of the section stays
    assert cfg.name == "my run"
    assert cfg.domain.sizes == {"train": 5, "search": 2, "val": 2, "test": 2}
    assert cfg.domain.options == {"levels": {"train": [1, 2]}}
    assert cfg.domain.harness is None
    assert cfg.schedule.budget_rollouts == 99
    assert cfg.model.name == "tiny"  # untouched preset values survive


def test_set_errors():
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config("tiny", overrides=["rft.k"])
    with pytest.raises(ConfigError, match="'seed' is not a section"):
        load_config("tiny", overrides=["seed.value=1"])
    last = load_config("tiny", overrides=["rft.k=2", "rft.k=5"])
    assert last.rft.k == 5


def test_config_round_trips_through_yaml_and_config_from_dict_reports_one_line():
    cfg = load_config("tiny", overrides=["rft.k=3"])
    again = config_from_dict(yaml.safe_load(yaml.safe_dump(cfg.model_dump())))
    assert again == cfg
    wanted = r"^run/config.yaml: unknown key 'eval.kk'; did you mean 'eval.k'\?$"
    with pytest.raises(ConfigError, match=wanted):
        config_from_dict({"eval": {"kk": 1}}, "run/config.yaml")


def test_domain_name_shorthand_and_unknown_domain():
    from whale.domains.registry import build_domain

    cfg = load_config("tiny", overrides=["domain=math"])
    assert cfg.domain.name == "math" and cfg.domain.sizes["train"] == 50  # shorthand keeps the preset sizes
    with pytest.raises(ConfigError, match="unknown domain 'nope'"):
        build_domain(load_config("tiny", overrides=["domain=nope"]).domain)
    with pytest.raises(ConfigError, match="domain math: .*bogus"):
        build_domain(load_config("tiny", overrides=["domain.options.bogus=1"]).domain)


def test_switching_domain_by_name_drops_the_previous_domains_options():
    cfg = load_config("default", overrides=["domain=chess"])
    assert cfg.domain.name == "chess" and cfg.domain.options == {}
    assert load_config("default", overrides=["domain=math"]).domain.options["levels"]["test"] == [1]
