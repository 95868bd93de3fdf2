//! Settling from elsewhere: settle_later and the Settler.

use crate::tests::*;

#[actix_rt::test]
async fn a_settler_sent_elsewhere_settles_and_a_lost_one_retries() {
    tokio::time::pause();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        let k = k.clone();
        async move {
            let (outcome, settler) = d.settle_later();
            if &data[..] == b"keep" {
                k.lock().push(settler);
            }
            outcome
        }
    });
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let keep_settled = pubsub.publish(message("m1", "keep"));
    let lose_settled = pubsub.publish(message("m2", "lose"));
    settled([&lose_settled]).await;
    assert_eq!(lose_settled.action(), Some(Action::Nack));
    assert_eq!(
        keep_settled.action(),
        None,
        "held until its settler is used"
    );
    let settler = kept.lock().pop().unwrap();
    settler.ack();
    settled([&keep_settled]).await;
    assert_eq!(keep_settled.action(), Some(Action::Ack));
}
