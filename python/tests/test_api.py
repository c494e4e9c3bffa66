"""The SDK's surface, without a scheduler: every public name is documented,
the package is typed, the stubs are generated (never committed), and every
spec in examples/ parses."""
import glob
import inspect
import os

import pytest

import dial
import dial.trial
from dial import _types

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..",
                                          ".."))


def public_members(obj):
    for name, member in inspect.getmembers(obj):
        if name.startswith("_"):
            continue
        if inspect.ismodule(obj) and getattr(member, "__module__", "") and \
                not str(getattr(member, "__module__", "")).startswith("dial"):
            continue  # re-exported from elsewhere (typing, grpc)
        yield name, member


def undocumented(module):
    missing = []
    names = getattr(module, "__all__", None) or [
        n for n, _ in public_members(module)]
    for name in names:
        member = getattr(module, name)
        if name == "__version__":
            continue
        if not (inspect.isclass(member) or callable(member)):
            continue
        if not inspect.getdoc(member):
            missing.append(f"{module.__name__}.{name}")
        if inspect.isclass(member):
            for attr, value in vars(member).items():
                if attr.startswith("_"):
                    continue
                target = value.fget if isinstance(value, property) else value
                if (inspect.isfunction(target) or isinstance(
                        value, (property, classmethod, staticmethod))) and \
                        not inspect.getdoc(getattr(target, "__func__",
                                                   target)):
                    missing.append(f"{module.__name__}.{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring():
    import importlib
    modules = [dial, dial.trial]
    try:
        modules.append(importlib.import_module("dial.pytorch"))
    except ImportError:  # torch is optional
        pass
    missing = [m for module in modules for m in undocumented(module)]
    assert missing == []


def test_the_package_is_typed_and_its_stubs_generated():
    package = os.path.dirname(dial.__file__)
    assert os.path.isfile(os.path.join(package, "py.typed"))
    for name in ("spec_pb2", "study_pb2", "service_pb2"):
        assert os.path.isfile(os.path.join(package, "v1", name + ".py"))
        assert os.path.isfile(os.path.join(package, "v1", name + ".pyi"))
    assert os.path.isfile(os.path.join(package, "v1", "service_pb2_grpc.py"))
    # Generated at build time into the installed package only: the source
    # tree holds none, so none can be committed.
    assert os.listdir(os.path.join(SOURCE_DIR, "python", "dial", "v1")) in (
        ["__init__.py"], ["__init__.py", "__pycache__"],
        ["__pycache__", "__init__.py"])


@pytest.mark.parametrize("path", sorted(
    glob.glob(os.path.join(SOURCE_DIR, "examples", "*.yaml")) +
    glob.glob(os.path.join(SOURCE_DIR, "examples", "python", "*.yaml"))))
def test_every_example_spec_parses(path):
    spec = dial.parse_spec(path)
    assert spec.name
    assert spec.search_space


def test_a_spec_from_text_a_dict_and_a_path_agree(tmp_path):
    text = ("name: agree\nobjective: {metric: loss, goal: MINIMIZE}\n"
            "search_space:\n  - {name: lr, float: {min: 1e-4, max: 1.0, "
            "scale: LOG}}\nbudget: {max_trials: 7}\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    as_dict = {"name": "agree",
               "objective": {"metric": "loss", "goal": "MINIMIZE"},
               "search_space": [{"name": "lr", "float": {
                   "min": 1e-4, "max": 1.0, "scale": "LOG"}}],
               "budget": {"max_trials": 7}}
    specs = [dial.parse_spec(text), dial.parse_spec(str(path)),
             dial.parse_spec(path), dial.parse_spec(as_dict)]
    assert all(s == specs[0] for s in specs)
    # PyYAML reads 1e-4 as a string; the proto JSON mapping takes it.
    assert specs[0].search_space[0].float.min == pytest.approx(1e-4)
    assert specs[0].budget.max_trials == 7


@pytest.mark.parametrize("spec, field", [
    ({"name": "x", "budget": {"max_trails": 3}}, "max_trails"),
    ("name: [unclosed", None),
    ("just-a-missing-file.yaml", None),
    (42, None),
])
def test_a_bad_spec_is_refused_before_any_call(spec, field):
    with pytest.raises(dial.InvalidArgument) as error:
        dial.parse_spec(spec)
    assert error.value.code == "INVALID_ARGUMENT"
    if field:
        assert field in error.value.message


def test_params_convert_both_ways():
    for value in (3, 2.5, "adam"):
        assert _types.param_value(_types.to_param_value("p", value)) == value
        assert type(_types.param_value(
            _types.to_param_value("p", value))) is type(value)
    with pytest.raises(dial.InvalidArgument) as error:
        _types.to_param_value("flag", True)
    assert error.value.field == "params.flag"


def test_metrics_for_the_trial_protocol_name_nan_and_infinities():
    assert _types.finite_or_name(float("nan")) == "NaN"
    assert _types.finite_or_name(float("inf")) == "Infinity"
    assert _types.finite_or_name(float("-inf")) == "-Infinity"
    assert _types.finite_or_name(1.5) == 1.5
