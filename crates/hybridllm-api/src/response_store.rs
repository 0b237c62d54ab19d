//! The frontend's store of `/v1/responses` objects (`store: true`): a bounded LRU map from
//! response id to what `GET /v1/responses/{id}`, its input items and `previous_response_id`
//! need. It lives in the frontend, so it serves every worker behind it; each frontend (and
//! so each server behind an external load balancer) has its own.
use lru::LruCache;
use serde_json::value::RawValue;
use serde_json::Value;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

pub struct StoredResponse {
    /// The API key that created it (None without `--api-key`): only that key sees it.
    pub owner: Option<String>,
    /// The response object as it was returned, serialized (one allocation to keep and drop).
    pub response: Box<RawValue>,
    /// This request's input items, with their ids (not those of earlier turns).
    pub input_items: Vec<Value>,
    /// Chat messages to continue from: the earlier turns, this input and this output.
    pub conversation: Vec<Value>,
    /// Created with `background: true` (only those can be cancelled).
    pub background: bool,
    /// The object's `status`: queued, in_progress, completed, incomplete, cancelled, failed.
    pub status: &'static str,
}

pub struct ResponseStore {
    /// None: a capacity of 0 stores nothing.
    map: Option<Mutex<LruCache<String, Arc<StoredResponse>>>>,
}

impl ResponseStore {
    pub fn new(capacity: usize) -> Self {
        ResponseStore {
            map: NonZeroUsize::new(capacity).map(|c| Mutex::new(LruCache::new(c))),
        }
    }

    /// Whether it keeps anything (a capacity above 0).
    pub fn enabled(&self) -> bool {
        self.map.is_some()
    }

    /// Stores it under `id`, dropping the least recently used entry when full.
    pub fn put(&self, id: String, r: StoredResponse) {
        if let Some(m) = &self.map {
            lock(m).put(id, Arc::new(r));
        }
    }

    /// The response if it exists and `owner` may see it (a use counts as recent).
    pub fn get(&self, id: &str, owner: Option<&str>) -> Option<Arc<StoredResponse>> {
        let mut m = lock(self.map.as_ref()?);
        let r = m.get(id)?;
        (r.owner.as_deref() == owner).then(|| r.clone())
    }

    /// Stores it under `id` unless a response stored there was cancelled meanwhile (a
    /// background response's end: its cancelled object stays).
    pub fn put_unless_cancelled(&self, id: String, r: StoredResponse) {
        if let Some(m) = &self.map {
            let mut m = lock(m);
            if m.peek(&id).is_some_and(|old| old.status == "cancelled") {
                return;
            }
            m.put(id, Arc::new(r));
        }
    }

    /// Replaces the response `owner` may see by what `f` makes of it, under one lock (so no
    /// other update comes between): None if there is none; `f`'s error, or its answer and
    /// whether it replaced it (`f` returns None to keep it).
    pub fn update<T, E>(
        &self,
        id: &str,
        owner: Option<&str>,
        f: impl FnOnce(&StoredResponse) -> Result<(Option<StoredResponse>, T), E>,
    ) -> Option<Result<T, E>> {
        let mut m = lock(self.map.as_ref()?);
        let old = m.peek(id).filter(|r| r.owner.as_deref() == owner)?.clone();
        Some(f(&old).map(|(new, answer)| {
            if let Some(new) = new {
                m.put(id.to_string(), Arc::new(new));
            }
            answer
        }))
    }

    /// Whether a response is stored under `id`, whoever owns it (not a use).
    pub fn contains(&self, id: &str) -> bool {
        self.map.as_ref().is_some_and(|m| lock(m).contains(id))
    }

    /// Removes it if it exists and `owner` may see it.
    pub fn remove(&self, id: &str, owner: Option<&str>) -> bool {
        let Some(m) = &self.map else { return false };
        let mut m = lock(m);
        if m.peek(id).is_some_and(|r| r.owner.as_deref() == owner) {
            m.pop(id);
            return true;
        }
        false
    }
}

/// A panic while holding the lock leaves the map consistent (no update spans two calls).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(owner: Option<&str>, n: i64) -> StoredResponse {
        StoredResponse {
            owner: owner.map(str::to_string),
            response: serde_json::value::to_raw_value(&serde_json::json!({"n": n})).unwrap(),
            input_items: vec![],
            conversation: vec![],
            background: false,
            status: "completed",
        }
    }

    #[test]
    fn bounded_lru_per_owner() {
        let s = ResponseStore::new(2);
        s.put("a".into(), stored(Some("k1"), 1));
        s.put("b".into(), stored(Some("k1"), 2));
        assert!(s.get("a", Some("k1")).is_some()); // a is now the most recent
        s.put("c".into(), stored(Some("k1"), 3)); // evicts b
        assert!(s.get("b", Some("k1")).is_none());
        assert_eq!(s.get("c", Some("k1")).unwrap().response.get(), r#"{"n":3}"#);
        assert!(s.get("a", Some("k2")).is_none());
        assert!(s.get("a", None).is_none());
        assert!(!s.remove("a", Some("k2")));
        assert!(s.remove("a", Some("k1")));
        assert!(s.get("a", Some("k1")).is_none());
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let s = ResponseStore::new(0);
        s.put("a".into(), stored(None, 1));
        assert!(s.get("a", None).is_none());
        assert!(!s.remove("a", None));
    }
}
