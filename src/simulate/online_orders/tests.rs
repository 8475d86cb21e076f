use super::*;

fn sieve() -> OnlineOrder {
    OnlineOrder::Sieve(Sieve::default())
}

fn s3fifo() -> OnlineOrder {
    OnlineOrder::S3Fifo(S3Fifo::default())
}

fn land(order: &mut OnlineOrder, names: &[&str]) {
    for name in names {
        order.landed(name, 10);
    }
}

/// SIEVE: the hand starts at the tail (the oldest); a visited image is passed over once (its
/// bit cleared), the first one not visited goes; the hand stays where it stopped, so the next
/// pass goes on from there rather than from the tail.
#[test]
fn sieve_spares_a_visited_image_once_and_goes_on_from_where_its_hand_stopped() {
    let mut order = sieve();
    land(&mut order, &["a", "b", "c", "d"]);
    order.hit("a");
    assert_eq!(order.evict(10, |_| true), ["b"]);
    // The hand is at c: a, passed over and cleared, is not next.
    assert_eq!(order.evict(10, |_| true), ["c"]);
    assert_eq!(order.evict(10, |_| true), ["d"]);
    assert_eq!(order.evict(10, |_| true), ["a"]);
    assert!(order.evict(10, |_| true).is_empty(), "nothing left");
}

/// Sizes: a pass removes until the bytes asked for are freed.
#[test]
fn a_pass_removes_until_the_bytes_asked_for_are_freed() {
    for mut order in [sieve(), s3fifo()] {
        land(&mut order, &["a", "b", "c", "d"]);
        assert_eq!(order.evict(25, |_| true).len(), 3, "{order:?}");
        assert_eq!(order.evict(1, |_| true).len(), 1, "{order:?}");
    }
}

/// An image that may not go (in use, younger than MinAge) is stepped over, never named; a pass
/// that can remove nothing gives up and leaves the order as it was, so running it again (a
/// GC cycle the driver skips) makes no difference.
#[test]
fn an_image_that_may_not_go_is_never_named_and_a_fruitless_pass_changes_nothing() {
    for mut order in [sieve(), s3fifo()] {
        land(&mut order, &["a", "b", "c"]);
        order.hit("b");
        order.hit("b");
        let before = format!("{order:?}");
        assert!(order.evict(10, |_| false).is_empty(), "{order:?}");
        assert_eq!(
            format!("{order:?}"),
            before,
            "a fruitless pass changed the order"
        );
        let out = order.evict(30, |name| name != "a");
        assert!(!out.contains(&"a".to_owned()), "{out:?}");
        assert_eq!(out.len(), 2, "{out:?}");
    }
}

/// S3-FIFO: a new image lands in the small queue and, hit at most once, is evicted from it
/// before an image of the main queue; hit twice it moves to main instead; an image evicted
/// from small and landing again (a ghost) goes to main at once.
#[test]
fn s3fifo_evicts_one_hit_images_from_small_first_and_a_returning_ghost_goes_to_main() {
    let mut order = s3fifo();
    // "hot" is hit twice while small: the first pass moves it to main and takes "x".
    land(&mut order, &["hot", "x"]);
    order.hit("hot");
    order.hit("hot");
    assert_eq!(order.evict(10, |_| true), ["x"]);
    let OnlineOrder::S3Fifo(state) = &order else {
        unreachable!("an S3-FIFO order")
    };
    assert_eq!(state.main.len(), 1, "{state:?}");
    assert!(state.ghosts.contains("x"), "x is remembered");
    // x lands again: a ghost, so it goes to main; new one-hit images go before both.
    land(&mut order, &["x", "y", "z"]);
    let OnlineOrder::S3Fifo(state) = &order else {
        unreachable!("an S3-FIFO order")
    };
    assert_eq!(state.main.len(), 2, "{state:?}");
    assert_eq!(order.evict(20, |_| true), ["y", "z"]);
}
