use std::time::Duration;

use bytes::Bytes;
use cloak_core::{Command, Engine, KeyDirectory, Limits, Outcome, RecordLayout, SetCondition, Simulator};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::{SchemeName, SchemeOptions, StoreSpec, build};

fn sim(name: SchemeName) -> Simulator {
    let master = MasterKey::from_bytes([1; 32]);
    let store = StoreSpec { capacity: 100, layout: RecordLayout { max_key: 16, max_value: 64 }, seed: Some(1) };
    let mut options = SchemeOptions::default();
    options.cloak.budgets = Some(vec![8, 4, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    let scheme = build(name, &store, &options, &master).unwrap();
    let dir = KeyDirectory::new(KeyHasher::new(&master), 100);
    let engine = Engine::new(scheme, dir, Limits { max_key: 16, max_value: 64, max_keys_per_command: 100 });
    Simulator::new(engine).with_storage_delay(Duration::from_millis(1))
}

#[test]
fn smoke() {
    for name in SchemeName::ALL {
        let mut s = sim(name);
        let set = |k: &str, v: &str| Command::Set { key: Bytes::from(k.to_string()), value: Bytes::from(v.to_string()), condition: SetCondition::Always };
        assert_eq!(s.execute(1, set("a", "1")), Some(Outcome::Ok), "{name}");
        assert_eq!(s.execute(1, Command::Get("a".into())), Some(Outcome::Value(Some("1".into()))), "{name}");
        s.run_for(Duration::from_secs(2));
        assert_eq!(s.execute(2, Command::Get("a".into())), Some(Outcome::Value(Some("1".into()))), "{name}");
        assert_eq!(s.execute(2, Command::Get("b".into())), Some(Outcome::Value(None)), "{name}");
        println!("{name}: {:?} {:?}", s.engine().scheme_stats(), s.elapsed());
    }
}
