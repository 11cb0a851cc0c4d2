"""seed_model.py: the seed Keras models and dtrain's flat parameter order.

Shared by keras_weights.py and make_reference.py (imported, not run). Import it
before keras: it sets the backend defaults.

Keras names the groups of a `.weights.h5` file after each layer's class in
snake case, numbered per class within the model in layer order ("conv2d",
"conv2d_1", ...), not after `layer.name` (which carries a process-wide
counter). dtrain's flat block is the weighted layers in order, each layer's
kernel then its bias, in Keras's own shapes: conv kernel (kh, kw, cin, cout)
= HWIO, dense kernel (in, units), bias (units), float32.
"""
import os

# jax is the backend this directory pins (setup-keras.sh); keep it on the CPU
# and quiet. A caller's KERAS_BACKEND / JAX_PLATFORMS win.
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MODELS = ("cnn", "mlp")


def build(name, input_shape=(28, 28, 1), classes=10):
    import keras
    from keras import layers

    if name == "cnn":
        stack = [
            layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(classes),
        ]
    elif name == "mlp":
        stack = [
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(classes),
        ]
    else:
        raise ValueError(f"unknown model {name!r}: expected cnn or mlp")
    return keras.Sequential([keras.Input(input_shape)] + stack)


def _snake(cls_name):
    import re

    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", cls_name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def keras_paths(model):
    """[(group, layer)] for every layer of a Sequential, as `.weights.h5`
    names them: layers/<snake class name>[_<k>], k counting per class."""
    used, out = {}, []
    for layer in model.layers:
        base = _snake(type(layer).__name__)
        k = used.get(base, -1) + 1
        used[base] = k
        out.append((f"layers/{base}" + (f"_{k}" if k else ""), layer))
    return out


def flat_tensors(model):
    """[(dataset path, variable)] in dtrain's flat-block order."""
    out = []
    for group, layer in keras_paths(model):
        for i, v in enumerate(layer.weights):  # kernel, then bias
            out.append((f"{group}/vars/{i}", v))
    return out
