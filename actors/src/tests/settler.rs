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
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let (keep, keep_settled) = received("m1", "", None, "keep");
    let (lose, lose_settled) = received("m2", "", None, "lose");
    streams[0].send(Ok(keep)).unwrap();
    streams[0].send(Ok(lose)).unwrap();
    settled(std::slice::from_ref(&lose_settled)).await;
    assert_eq!(lose_settled.action(), Some(Action::Nack));
    assert_eq!(
        keep_settled.action(),
        None,
        "held until its settler is used"
    );
    let settler = kept.lock().pop().unwrap();
    settler.ack();
    settled(std::slice::from_ref(&keep_settled)).await;
    assert_eq!(keep_settled.action(), Some(Action::Ack));
}
