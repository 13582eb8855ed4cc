"""Independent numpy implementations of the pruning methods of src/prune
(magnitude, Wanda, SparseGPT; unstructured and N:M), written from the papers
and their reference code (Sun et al. 2023, "A Simple and Effective Pruning
Approach for LLMs"; Frantar & Alistarh 2023, "SparseGPT"), with the same
conventions: ties go to the lower column index; an unstructured row loses
floor(cols * sparsity) weights; N:M zeroes the M - N lowest of each group."""
import numpy as np


def prune_by_score(w, score, sparsity, n=0, m=0):
    w = w.copy()
    rows, cols = w.shape
    if m:
        for g in range(0, cols, m):
            order = np.argsort(score[:, g:g + m], axis=1, kind="stable")[:, :m - n]
            np.put_along_axis(w[:, g:g + m], order, 0.0, axis=1)
    else:
        k = int(cols * sparsity)
        order = np.argsort(score, axis=1, kind="stable")[:, :k]
        np.put_along_axis(w, order, 0.0, axis=1)
    return w


def magnitude(w, sparsity, n=0, m=0):
    return prune_by_score(w, np.abs(w.astype(np.float64)), sparsity, n, m)


def wanda(w, x, sparsity, n=0, m=0):
    """x [tokens, cols]: the layer's calibration inputs."""
    norm = np.sqrt((x.astype(np.float64) ** 2).sum(axis=0))
    return prune_by_score(w, np.abs(w.astype(np.float64)) * norm[None, :], sparsity, n, m)


def sparsegpt(w, x, sparsity, n=0, m=0, block=128, damp=0.01):
    """The reference algorithm (SparseGPT's fasterprune), in float64."""
    W = w.astype(np.float64).copy()
    X = x.astype(np.float64)
    H = X.T @ X
    cols = W.shape[1]
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += damp * np.mean(np.diag(H)) * np.eye(cols)
    # Upper Cholesky factor of H^-1.
    Hinv = np.linalg.cholesky(np.linalg.inv(H)).T
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        cnt = i2 - i1
        W1 = W[:, i1:i2].copy()
        Q1 = np.zeros_like(W1)
        Err1 = np.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        d = np.diag(Hinv1)
        if m == 0:
            tmp = W1 ** 2 / d[None, :] ** 2
            thresh = np.sort(tmp.ravel())[int(tmp.size * sparsity)]
            mask1 = tmp <= thresh
        else:
            mask1 = np.zeros_like(W1, dtype=bool)
        for i in range(cnt):
            if m and i % m == 0:
                tmp = W1[:, i:i + m] ** 2 / d[None, i:i + m] ** 2
                order = np.argsort(tmp, axis=1, kind="stable")[:, :m - n]
                np.put_along_axis(mask1[:, i:i + m], order, True, axis=1)
            col = W1[:, i]
            q = col.copy()
            q[mask1[:, i]] = 0.0
            Q1[:, i] = q
            err = (col - q) / Hinv1[i, i]
            W1[:, i:] -= np.outer(err, Hinv1[i, i:])
            Err1[:, i] = err
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return W
