//! Data parallelism inside one frontend: N engine workers, each behind its own `EngineMux`
//! (one GenerateStream call each), and a request routed to the worker with the fewest
//! outstanding tokens (prompt + max_tokens of the requests it is running). With
//! `--routing prefix` a request goes to the worker that last served the longest matching
//! prompt prefix (hashes of its first blocks, as SGLang's cache-aware router keeps them), so
//! that worker's prefix cache hits, unless that worker is much busier than the least loaded.
//!
//! A request with a `session_id` goes to the worker its session last used, under either
//! routing and on the same overload rule, so a conversation's turns find their prefix cached.
//!
//! A worker whose health check fails, or whose stream broke, leaves the rotation until it
//! answers again (`watch`); requests go to the others while any is up.
use crate::engine::{EmbedResult, Engine, StepStream};
use crate::engine_client::EngineClient;
use crate::engine_mux::EngineMux;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use hybridllm_api::engine_io::{EmbedRequest, EngineError, GenerateRequest};
use lru::LruCache;
use prometheus::{IntCounter, IntGauge};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Prompt tokens per hashed block (the KV cache's block size).
const BLOCK: usize = 16;
/// Blocks hashed per prompt: prefixes beyond 1,024 tokens route like their first 1,024.
const MAX_BLOCKS: usize = 64;
/// Block hashes remembered (least recently used forgotten first).
const PREFIXES: usize = 1 << 16;
/// Sessions remembered (least recently used forgotten first).
const SESSIONS: usize = 1 << 16;
/// A prefix match wins while its worker's load is at most 2x the least loaded's plus this
/// many tokens; beyond that, load wins (one hot prefix must not pile onto one worker).
const PREFIX_SLACK_TOKENS: i64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// The worker with the fewest outstanding tokens.
    LeastLoad,
    /// The worker that served the longest matching prompt prefix, unless it is overloaded.
    Prefix,
}

pub struct Worker {
    pub mux: EngineMux,
    /// Outstanding tokens (`hybridllm:worker_outstanding_tokens{worker}`).
    pub load: IntGauge,
    /// Requests routed here (`hybridllm:worker_requests_total{worker}`).
    pub routed: IntCounter,
    /// 1 while in the rotation (`hybridllm:worker_up{worker}`).
    pub up: IntGauge,
}

pub struct EngineRouter {
    workers: Vec<Worker>,
    routing: Routing,
    prefixes: Mutex<LruCache<u64, usize>>,
    /// A session's worker, by the hash of its id.
    sessions: Mutex<LruCache<u64, usize>>,
    /// Rotates the first worker looked at, so equal loads take turns.
    next: AtomicUsize,
}

/// Gives back a request's tokens when its stream or future is dropped, however it ended.
struct Reservation {
    load: IntGauge,
    cost: i64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.load.sub(self.cost);
    }
}

/// Chained hashes of the prompt's full blocks: block i's hash covers blocks 0..=i.
fn block_hashes(prompt: &[u32]) -> Vec<u64> {
    let mut h = DefaultHasher::new();
    prompt
        .chunks_exact(BLOCK)
        .take(MAX_BLOCKS)
        .map(|b| {
            b.hash(&mut h);
            h.finish()
        })
        .collect()
}

impl EngineRouter {
    pub fn new(workers: Vec<Worker>, routing: Routing) -> Self {
        assert!(!workers.is_empty(), "at least one engine worker");
        EngineRouter {
            workers,
            routing,
            prefixes: Mutex::new(LruCache::new(NonZeroUsize::new(PREFIXES).expect("nonzero"))),
            sessions: Mutex::new(LruCache::new(NonZeroUsize::new(SESSIONS).expect("nonzero"))),
            next: AtomicUsize::new(0),
        }
    }

    /// Fewest outstanding tokens among the workers up (among all when none is: the request
    /// then fails with the worker's own error).
    fn least_loaded(&self) -> usize {
        let n = self.workers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let any_up = self.workers.iter().any(|w| w.up.get() == 1);
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| !any_up || self.workers[i].up.get() == 1)
            .min_by_key(|&i| self.workers[i].load.get())
            .unwrap_or(0)
    }

    fn set_up(&self, i: usize, up: bool) {
        let was = self.workers[i].up.get() == 1;
        if was != up {
            if up {
                tracing::info!("engine worker {i} answers again: back in the rotation");
            } else {
                tracing::warn!("engine worker {i} is down: out of the rotation");
            }
        }
        self.workers[i].up.set(up as i64);
    }

    /// Whether every worker is up, and whether any is.
    #[cfg(test)]
    fn up(&self) -> (bool, bool) {
        let up = self.workers.iter().filter(|w| w.up.get() == 1).count();
        (up == self.workers.len(), up > 0)
    }

    /// Health-checks each worker every `every` (one Health call, at most `every` each) and
    /// keeps the rotation to those that answer SERVING.
    pub fn watch(self: Arc<Self>, clients: Vec<EngineClient>, every: Duration) {
        tokio::spawn(async move {
            loop {
                let checks = clients
                    .iter()
                    .map(|c| crate::engine_client::serving(c, every));
                for (i, ok) in futures_util::future::join_all(checks)
                    .await
                    .into_iter()
                    .enumerate()
                {
                    self.set_up(i, ok);
                }
                tokio::time::sleep(every).await;
            }
        });
    }

    /// The worker for a prompt of a session, if any (see the module comment).
    pub fn pick(&self, prompt: &[u32], session: Option<&str>) -> usize {
        let least = self.least_loaded();
        if self.workers.len() == 1 {
            return least;
        }
        let limit = 2 * self.workers[least].load.get() + PREFIX_SLACK_TOKENS;
        let usable = |w: &usize| {
            *w < self.workers.len()
                && self.workers[*w].up.get() == 1
                && self.workers[*w].load.get() <= limit
        };
        let session = session.map(|id| {
            let mut h = DefaultHasher::new();
            id.hash(&mut h);
            h.finish()
        });
        // The sessions' lock only for requests that name one.
        let sessions = || self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let sticky = session.and_then(|k| sessions().get(&k).copied().filter(usable));
        let choice = if self.routing == Routing::LeastLoad {
            sticky.unwrap_or(least)
        } else {
            let hashes = block_hashes(prompt);
            let mut map = self.prefixes.lock().unwrap_or_else(|e| e.into_inner());
            let choice = sticky.unwrap_or_else(|| {
                let hit = hashes.iter().rev().find_map(|h| map.get(h).copied());
                hit.filter(usable).unwrap_or(least)
            });
            for h in hashes {
                map.put(h, choice);
            }
            choice
        };
        if let Some(k) = session {
            sessions().put(k, choice);
        }
        choice
    }

    fn reserve(&self, i: usize, cost: usize) -> Reservation {
        let w = &self.workers[i];
        let cost = cost as i64;
        w.load.add(cost);
        w.routed.inc();
        Reservation {
            load: w.load.clone(),
            cost,
        }
    }
}

impl Engine for EngineRouter {
    fn generate(&self, req: GenerateRequest) -> StepStream {
        let i = self.pick(&req.prompt_ids, req.session_id.as_deref());
        let max_tokens = req.sampling.max_tokens.unwrap_or(0) as usize;
        let n = req.sampling.n.unwrap_or(1).max(1) as usize;
        let guard = self.reserve(i, req.prompt_ids.len() + n * max_tokens);
        let stream = self.workers[i].mux.generate(req);
        let up = self.workers[i].up.clone();
        Box::pin(stream.map(move |r| {
            let _held = &guard;
            if matches!(&r, Err(EngineError::Unavailable(_))) {
                up.set(0); // the stream broke: no more requests until the watcher sees it up
            }
            r
        }))
    }

    fn embed(&self, req: EmbedRequest) -> BoxFuture<'static, EmbedResult> {
        let first = req.inputs.first().map_or(&[][..], |x| &x[..]);
        let i = self.pick(first, None);
        let cost = req.inputs.iter().map(Vec::len).sum();
        let guard = self.reserve(i, cost);
        let fut = self.workers[i].mux.embed(req);
        Box::pin(async move {
            let out = fut.await;
            drop(guard);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(n: usize, routing: Routing) -> EngineRouter {
        let workers = (0..n)
            .map(|i| Worker {
                mux: EngineMux::new(crate::engine_client::connect("http://127.0.0.1:1").unwrap()),
                load: IntGauge::new(format!("load{i}"), "l").unwrap(),
                routed: IntCounter::new(format!("routed{i}"), "r").unwrap(),
                up: {
                    let g = IntGauge::new(format!("up{i}"), "u").unwrap();
                    g.set(1);
                    g
                },
            })
            .collect();
        EngineRouter::new(workers, routing)
    }

    #[tokio::test]
    async fn least_load_spreads_and_reservations_return() {
        let r = router(2, Routing::LeastLoad);
        let a = r.pick(&[1; 40], None);
        let ga = r.reserve(a, 100);
        let b = r.pick(&[1; 40], None);
        assert_ne!(a, b, "the idle worker takes the next request");
        let gb = r.reserve(b, 50);
        assert_eq!(r.pick(&[2; 8], None), b, "fewest outstanding tokens");
        drop(ga);
        drop(gb);
        assert_eq!(r.workers[0].load.get() + r.workers[1].load.get(), 0);
    }

    #[tokio::test]
    async fn prefix_routing_follows_the_longest_prefix_unless_overloaded() {
        let r = router(2, Routing::Prefix);
        let shared: Vec<u32> = (0..64).collect();
        let first = r.pick(&shared, None);
        let _busy = r.reserve(first, 1000);
        let mut other = shared.clone();
        other.extend([7; 20]);
        assert_eq!(
            r.pick(&other, None),
            first,
            "a longer prompt with the same prefix"
        );
        let _hot = r.reserve(first, 10_000);
        assert_ne!(r.pick(&shared, None), first, "overloaded: load wins");
        assert_eq!(block_hashes(&[0; 15]), Vec::<u64>::new());
        assert_eq!(block_hashes(&shared).len(), 4);
    }

    #[tokio::test]
    async fn a_session_stays_on_its_worker_unless_overloaded_or_down() {
        for routing in [Routing::LeastLoad, Routing::Prefix] {
            let r = router(2, routing);
            let w = r.pick(&[1; 40], Some("s"));
            let _busy = r.reserve(w, 100);
            for k in 0..4 {
                assert_eq!(
                    r.pick(&[k; 40], Some("s")),
                    w,
                    "{routing:?}: its worker, though busier"
                );
            }
            assert_ne!(
                r.pick(&[9; 40], Some("t")),
                w,
                "{routing:?}: a new session: least load"
            );
            let _hot = r.reserve(w, 10_000);
            let moved = r.pick(&[5; 40], Some("s"));
            assert_ne!(moved, w, "{routing:?}: overloaded: load wins");
            assert_eq!(
                r.pick(&[6; 40], Some("s")),
                moved,
                "{routing:?}: and the session follows"
            );
        }
    }

    #[tokio::test]
    async fn a_worker_down_leaves_the_rotation_until_it_is_up() {
        let r = router(3, Routing::Prefix);
        let shared: Vec<u32> = (0..64).collect();
        let first = r.pick(&shared, None);
        r.set_up(first, false);
        assert_eq!(r.up(), (false, true));
        for k in 0..6 {
            assert_ne!(r.pick(&[k; 40], None), first, "least load skips it");
        }
        assert_ne!(r.pick(&shared, None), first, "its prefixes too");
        for i in 0..3 {
            r.set_up(i, false);
        }
        assert_eq!(r.up(), (false, false));
        let _ = r.pick(&[1; 8], None); // none up: any worker (its error goes to the client)
        r.set_up(first, true);
        assert_eq!(r.pick(&[9; 8], None), first, "the only one up");
    }
}
