# Logistic regression by gradient descent (the JAX version of ../logistic.ard).
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)

def loss(p, x, y):
    w, b = p
    z = x @ w + b
    return jnp.mean(jax.nn.softplus(z) - y * z)

def train(x, y, lr, steps):
    def step(p, _):
        g = jax.grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g), None
    return jax.lax.scan(step, (jnp.zeros(x.shape[1]), 0.0), None, length=steps)[0]
