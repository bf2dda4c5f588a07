//! The model suite's shared-records store, in memory: every fleet summary a replica writes is
//! checked against that replica's model at that instant.

use super::*;

/// The shared-records store of a schedule, in memory; every fleet summary written is checked
/// against the writing replica's model at that instant.
#[derive(Debug)]
pub(super) struct Records {
    pub(super) records: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    pub(super) world: Shared,
    /// Replica ids by index.
    pub(super) ids: Vec<String>,
}

impl SharedRecords for Records {
    fn describe(&self) -> String {
        "in-memory records".into()
    }

    fn create<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8]) -> skyconf_sources::StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut records = self.records.lock().unwrap();
            let key = (kind.to_owned(), name.to_owned());
            if records.contains_key(&key) {
                return Ok(false);
            }
            records.insert(key, value.to_vec());
            Ok(true)
        })
    }

    fn put<'a>(
        &'a self,
        kind: &'a str,
        name: &'a str,
        value: &'a [u8],
        _lifetime: Lifetime,
    ) -> skyconf_sources::StoreFuture<'a, ()> {
        Box::pin(async move {
            if kind == FLEET_KIND {
                self.check_summary(name, value);
            }
            self.records.lock().unwrap().insert((kind.to_owned(), name.to_owned()), value.to_vec());
            Ok(())
        })
    }

    fn get<'a>(&'a self, kind: &'a str, name: &'a str) -> skyconf_sources::StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move { Ok(self.records.lock().unwrap().get(&(kind.to_owned(), name.to_owned())).cloned()) })
    }

    fn list<'a>(&'a self, kind: &'a str) -> skyconf_sources::StoreFuture<'a, skyconf_sources::shared::Listed> {
        Box::pin(async move {
            let records = self.records.lock().unwrap();
            Ok(records.iter().filter(|((k, _), _)| k == kind).map(|((_, n), v)| (n.clone(), v.clone())).collect())
        })
    }

    fn delete<'a>(&'a self, kind: &'a str, name: &'a str) -> skyconf_sources::StoreFuture<'a, ()> {
        Box::pin(async move {
            self.records.lock().unwrap().remove(&(kind.to_owned(), name.to_owned()));
            Ok(())
        })
    }
}

impl Records {
    /// A summary is written: its counts must be the writer's model's now.
    pub(super) fn check_summary(&self, name: &str, value: &[u8]) {
        let mut world = lock(&self.world);
        let Some(replica) = self.ids.iter().position(|id| id == name) else {
            world.fail(format!("a summary of an unknown replica `{name}`"));
            return;
        };
        let summary: Summary = match serde_json::from_slice(value) {
            Ok(summary) => summary,
            Err(error) => return world.fail(format!("a summary does not read: {error}")),
        };
        let expected = world.models[replica].counts(&world.served);
        let published: BTreeMap<String, StateCounts> =
            summary.services.iter().map(|(name, s)| (name.clone(), s.counts)).collect();
        if published != expected {
            world.fail(format!("replica {replica}'s summary says {published:?}, the model {expected:?}"));
        }
        world.summaries_checked += 1;
    }
}
