// js-libp2p 3.x targets Node >= 22; the CI image ships Node 20. Fill the gaps it actually hits.
// Imported first by peer.mjs: ES modules evaluate in import order, so this runs before libp2p's.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
