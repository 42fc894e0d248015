# A two-layer tanh network with softmax cross-entropy (the JAX version of ../mlp_softmax.ard).
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)

def logits(p, x):
    w1, b1, w2, b2 = p
    hidden = jnp.tanh(w1 @ x + b1)
    return w2 @ hidden + b2

def loss(p, x, y):
    z = jax.vmap(lambda xi: logits(p, xi))(x)
    return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.take_along_axis(z, y[:, None], axis=1)[:, 0])

def train(p0, x, y, lr, steps):
    def step(p, _):
        g = jax.grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g), None
    return jax.lax.scan(step, p0, None, length=steps)[0]
