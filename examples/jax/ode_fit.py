# Fitting Lotka-Volterra rates to a trajectory (the JAX version of ../ode_fit.ard).
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)

def rhs(p, s):
    return jnp.array([p[0] * s[0] - p[1] * s[0] * s[1], p[2] * s[0] * s[1] - p[3] * s[1]])

def rk4(p, h, s):
    k1 = rhs(p, s)
    k2 = rhs(p, s + 0.5 * h * k1)
    k3 = rhs(p, s + 0.5 * h * k2)
    k4 = rhs(p, s + h * k3)
    return s + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

def loss(p, s0, h, obs):
    _, traj = jax.lax.scan(lambda s, _: (rk4(p, h, s), s), s0, None, length=obs.shape[0])
    return jnp.sum((traj - obs) ** 2)

def fit(p0, s0, h, obs, lr, steps):
    step = lambda p, _: (p - lr * jax.grad(loss)(p, s0, h, obs), None)
    p = jax.lax.scan(step, p0, None, length=steps)[0]
    return p, loss(p, s0, h, obs)
