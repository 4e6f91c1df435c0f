//! Property test: kernel names survive JSON escaping and the import.

use gputrace_format::Event;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn kernel_names_round_trip(name in "(\\PC|[\"\\\\/\u{0}-\u{1f}]|😀|é|\u{2028}){0,40}") {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("names.json");
        let event = serde_json::json!({
            "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 5.25, "dur": 1,
            "args": {"device": 0, "stream": 7, "correlation": 1}
        });
        let doc = serde_json::json!({"schemaVersion": 1, "traceEvents": [event]});
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        let trace = gputrace_kineto::to_trace(&path).unwrap();
        let events: Vec<Event> = trace.events().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(events.len(), 1);
        let Event::Kernel(k) = events[0] else { panic!("not a kernel: {:?}", events[0]) };
        let got = trace.name(k.name).into_owned();
        prop_assert_eq!(got.as_str(), name.as_str());
        prop_assert_eq!(k.start.0, 5_250);
    }
}
