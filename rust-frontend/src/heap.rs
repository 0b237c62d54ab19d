//! The global allocator (mimalloc), optionally counting the bytes allocated and not yet freed.
//!
//! Resident memory cannot tell a leak from allocator retention: mimalloc's RSS wanders by
//! ~10 MiB in a ~50 MiB frontend as its pages fragment under 1,000 concurrent streams, and
//! glibc holds its high-water mark. The live count is exact. With `HYBRIDLLM_HEAP_STATS=1`
//! in the environment, `/metrics` reports it (`process_heap_allocated_bytes`) and the soak
//! (`hybridllm bench soak`, which sets it) checks it. Off by default: counting costs a
//! thread-local add per allocation and free (the soak's A/B at concurrency 64 put it at
//! 0.42 -> 0.46 ms of frontend CPU per request, inside the noise but not clearly free);
//! off, it costs one relaxed load.
//!
//! Each thread adds to a slot of its own (a plain load and store, no locked instruction and no
//! shared cache line); a thread past the first `SLOTS` shares the last slot with atomic adds.
//! Reading sums the slots: a thread's frees of another thread's blocks make single slots go
//! negative, never the sum. Counting starts when `main` turns it on: the few blocks allocated
//! before (the arguments) are not in it.
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering::Relaxed};

// Serving allocates many short-lived buffers across threads: glibc malloc took ~17% of the
// frontend's CPU under load.
#[global_allocator]
pub static GLOBAL: Counting<mimalloc::MiMalloc> = Counting::new(mimalloc::MiMalloc);

const SLOTS: usize = 64;

#[repr(align(64))]
struct Slot(AtomicIsize);

/// Which slot this thread adds to, the same index in every `Counting`.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and without a destructor: no allocation and no registration, so it
    // is safe to touch from inside the allocator, also while a thread exits.
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_slot() -> usize {
    MY_SLOT.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT_SLOT.fetch_add(1, Relaxed));
        }
        s.get()
    })
}

/// `A`, counting the bytes it hands out once `enable` has turned counting on.
pub struct Counting<A> {
    inner: A,
    on: AtomicBool,
    slots: [Slot; SLOTS],
}

impl<A> Counting<A> {
    pub const fn new(inner: A) -> Self {
        Counting {
            inner,
            on: AtomicBool::new(false),
            slots: [const { Slot(AtomicIsize::new(0)) }; SLOTS],
        }
    }

    pub fn enable(&self) {
        self.on.store(true, Relaxed);
    }

    /// Counts from now on when `HYBRIDLLM_HEAP_STATS=1`.
    pub fn enable_from_env(&self) {
        if std::env::var_os("HYBRIDLLM_HEAP_STATS").is_some_and(|v| v == "1") {
            self.enable();
        }
    }

    /// Bytes allocated and not yet freed since counting started, if it is on.
    pub fn live_bytes(&self) -> Option<i64> {
        self.on
            .load(Relaxed)
            .then(|| self.slots.iter().map(|s| s.0.load(Relaxed) as i64).sum())
    }

    fn add(&self, delta: isize) {
        if !self.on.load(Relaxed) {
            return;
        }
        let slot = my_slot();
        if slot < SLOTS - 1 {
            // This thread is the slot's only writer.
            let c = &self.slots[slot].0;
            c.store(c.load(Relaxed) + delta, Relaxed);
        } else {
            self.slots[SLOTS - 1].0.fetch_add(delta, Relaxed);
        }
    }
}

unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = self.inner.alloc(layout);
        if !p.is_null() {
            self.add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = self.inner.alloc_zeroed(layout);
        if !p.is_null() {
            self.add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.inner.dealloc(ptr, layout);
        self.add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = self.inner.realloc(ptr, layout, new_size);
        if !p.is_null() {
            self.add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    /// An instance of its own, so the counts are exactly this test's.
    static COUNTED: Counting<System> = Counting::new(System);

    #[test]
    fn counts_what_is_live_across_threads() {
        let layout = Layout::from_size_align(1000, 8).unwrap();
        let p = unsafe { COUNTED.alloc(layout) } as usize;
        assert_eq!(COUNTED.live_bytes(), None, "off until enabled");
        unsafe { COUNTED.dealloc(p as *mut u8, layout) };
        COUNTED.enable();
        assert_eq!(COUNTED.live_bytes(), Some(0));
        let a = unsafe { COUNTED.alloc(layout) } as usize;
        let b = unsafe { COUNTED.alloc_zeroed(layout) } as usize;
        let b = unsafe { COUNTED.realloc(b as *mut u8, layout, 3000) } as usize;
        assert_eq!(COUNTED.live_bytes(), Some(4000));
        // Freed on other threads: their slots go negative, the sum is exact.
        std::thread::spawn(move || unsafe { COUNTED.dealloc(a as *mut u8, layout) })
            .join()
            .unwrap();
        assert_eq!(COUNTED.live_bytes(), Some(3000));
        let big = Layout::from_size_align(3000, 8).unwrap();
        std::thread::spawn(move || unsafe { COUNTED.dealloc(b as *mut u8, big) })
            .join()
            .unwrap();
        assert_eq!(COUNTED.live_bytes(), Some(0));
    }
}
