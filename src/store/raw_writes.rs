//! Raw writes for tests only: bytes put into (or removed from) any table of a read-write
//! store in their own transaction, bypassing every rule of `apply` (validation, the index kept
//! in step, the journal), so the negative tests of [`Store::check`] can build each violation.

use redb::{TableDefinition, WriteTransaction};

use super::codec::Codec;
use super::tables::{
    BACKOFF, EVICTION_PREFIX, Encoded, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, SIGNALS, Stored,
    USES, WARM,
};
use super::{Handle, Store, codec};
use crate::model::{ImageNames, RecordKey};

impl Store {
    /// Writes raw bytes into a table, or with `value` `None` removes the key, bypassing every
    /// rule: for the negative tests of `Store::check`. The index's value is `()`.
    pub(crate) fn raw_write_for_tests(&self, table: &str, key: &[u8], value: Option<&[u8]>) {
        fn put<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
            txn: &WriteTransaction,
            def: TableDefinition<Stored<K>, Stored<V>>,
            key: &[u8],
            value: Option<&[u8]>,
        ) {
            let mut t = txn.open_table(def).expect("table");
            match value {
                Some(v) => {
                    t.insert(Encoded::new(key), Encoded::new(v))
                        .expect("insert");
                }
                None => {
                    t.remove(Encoded::new(key)).expect("remove");
                }
            }
        }
        let Handle::Write(db) = &*self.read_handle() else {
            panic!("a read-write store");
        };
        self.forget_journal_keys();
        let txn = db.begin_write().expect("begin");
        match table {
            "images" => put(&txn, IMAGES, key, value),
            "backoff" => put(&txn, BACKOFF, key, value),
            "meta" => put(&txn, META, key, value),
            "names" => put(&txn, NAMES, key, value),
            "journal" => put(&txn, JOURNAL, key, value),
            "pins" => put(&txn, PINS, key, value),
            "uses" => put(&txn, USES, key, value),
            "pulls" => put(&txn, PULLS, key, value),
            "warm" => put(&txn, WARM, key, value),
            "signals" => put(&txn, SIGNALS, key, value),
            "eviction_prefix" => {
                let mut t = txn.open_table(EVICTION_PREFIX).expect("table");
                match value {
                    Some(_) => {
                        t.insert(Encoded::new(key), ()).expect("insert");
                    }
                    None => {
                        t.remove(Encoded::new(key)).expect("remove");
                    }
                }
            }
            other => panic!("no raw writes to {other}"),
        }
        txn.commit().expect("commit");
        self.forget_history_mirror();
    }

    /// Writes raw bytes into a table, bypassing every rule.
    pub(crate) fn raw_bytes_for_tests(&self, table: &str, key: &[u8], value: &[u8]) {
        self.raw_write_for_tests(table, key, Some(value));
    }

    /// A names row written as is.
    pub(crate) fn raw_insert_for_tests(&self, table: &str, key: &RecordKey, names: &ImageNames) {
        self.raw_bytes_for_tests(table, &key.encode(), &names.encode());
    }
}
