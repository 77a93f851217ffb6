use super::*;
use crate::http::Method;

fn listed_paths() -> Vec<String> {
    all().into_iter().map(|e| e.path).collect()
}

#[test]
fn off_lists_nothing() {
    enable(false);
    let req = Request::for_test(Method::Get, "/in-flight-off", &[]);
    assert!(InFlight::enter(&req).is_none());
    assert!(!listed_paths().contains(&"/in-flight-off".to_owned()));
}

#[test]
fn on_lists_until_dropped_and_reuses_the_slot() {
    enable(true);
    let req = Request::for_test(
        Method::Post,
        "/in-flight-on?a=1",
        &[("host", "example.com"), ("user-agent", "t/1")],
    );
    let first = InFlight::enter(&req).expect("listed");
    let e = all()
        .into_iter()
        .find(|e| e.path == "/in-flight-on")
        .expect("in the list");
    assert_eq!((e.method.as_str(), e.query.as_str()), ("POST", "a=1"));
    assert_eq!(e.user_agent, "t/1");
    let slot = first.slot;
    drop(first);
    assert!(!listed_paths().contains(&"/in-flight-on".to_owned()));
    let again = InFlight::enter(&req).expect("listed");
    assert_eq!(again.slot, slot, "a freed slot is taken again");
    drop(again);
    enable(false);
}

#[test]
fn a_phase_change_shows() {
    enable(true);
    let req = Request::for_test(Method::Post, "/in-flight-phase", &[]);
    let listed = InFlight::enter_in(&req, Phase::Receiving);
    let phase = || {
        all()
            .into_iter()
            .find(|e| e.path == "/in-flight-phase")
            .map(|e| e.phase)
    };
    assert_eq!(phase(), Some(Phase::Receiving));
    InFlight::set_phase(&listed, Phase::Sending);
    assert_eq!(phase(), Some(Phase::Sending));
    drop(listed);
    assert_eq!(phase(), None);
    enable(false);
}
