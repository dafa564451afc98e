//! Requests built from etcd's generated messages: comparisons (a
//! transaction's guards), operations (what it does) and ranges, plus the
//! few readings of an answer the node needs. Plain functions, no I/O.

use crate::KeyValue;
use crate::pb::{self, compare, request_op, response_op};

/// The end of the range of every key that starts with `prefix` (etcd's
/// "prefix plus one"); `\0` when every byte of `prefix` is 0xff.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn compare(key: impl Into<Vec<u8>>, target: compare::CompareTarget, union: compare::TargetUnion) -> pb::Compare {
    pb::Compare {
        result: compare::CompareResult::Equal as i32,
        target: target as i32,
        key: key.into(),
        range_end: Vec::new(),
        target_union: Some(union),
    }
}

/// `key`'s version is `version` (0: the key does not exist).
pub fn version_is(key: impl Into<Vec<u8>>, version: i64) -> pb::Compare {
    compare(key, compare::CompareTarget::Version, compare::TargetUnion::Version(version))
}

/// `key` was created at `revision` (0: the key does not exist).
pub fn created_at(key: impl Into<Vec<u8>>, revision: i64) -> pb::Compare {
    compare(key, compare::CompareTarget::Create, compare::TargetUnion::CreateRevision(revision))
}

/// `key` was last modified at `revision`.
pub fn modified_at(key: impl Into<Vec<u8>>, revision: i64) -> pb::Compare {
    compare(key, compare::CompareTarget::Mod, compare::TargetUnion::ModRevision(revision))
}

/// `key`'s value is `value`.
pub fn value_is(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> pb::Compare {
    compare(key, compare::CompareTarget::Value, compare::TargetUnion::Value(value.into()))
}

/// Puts `value` under `key`.
pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> pb::RequestOp {
    put_with_lease(key, value, 0)
}

/// Puts `value` under `key`, attached to `lease` (0: none).
pub fn put_with_lease(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> pb::RequestOp {
    let put = pb::PutRequest { key: key.into(), value: value.into(), lease, ..Default::default() };
    pb::RequestOp { request: Some(request_op::Request::RequestPut(put)) }
}

/// Reads `key`.
pub fn get(key: impl Into<Vec<u8>>) -> pb::RequestOp {
    pb::RequestOp { request: Some(request_op::Request::RequestRange(range(key))) }
}

/// Deletes `key`.
pub fn delete(key: impl Into<Vec<u8>>) -> pb::RequestOp {
    delete_range(key, Vec::new())
}

/// Deletes every key in `[start, end)`.
pub fn delete_range(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> pb::RequestOp {
    let delete = pb::DeleteRangeRequest { key: start.into(), range_end: end.into(), prev_kv: false };
    pb::RequestOp { request: Some(request_op::Request::RequestDeleteRange(delete)) }
}

/// Deletes every key that starts with `prefix`.
pub fn delete_prefix(prefix: impl Into<Vec<u8>>) -> pb::DeleteRangeRequest {
    let prefix = prefix.into();
    pb::DeleteRangeRequest { range_end: prefix_end(&prefix), key: prefix, prev_kv: false }
}

/// A read of `key` alone, now; set `range_end`, `revision`, `limit` and
/// `keys_only` on the result for more.
pub fn range(key: impl Into<Vec<u8>>) -> pb::RangeRequest {
    pb::RangeRequest { key: key.into(), ..Default::default() }
}

/// A transaction: when every comparison holds, `success`, else `failure`.
pub fn txn(compare: Vec<pb::Compare>, success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::TxnRequest {
    pb::TxnRequest { compare, success, failure }
}

/// The keys a transaction's reads found, in the order of its operations
/// (the answers of other operations are skipped).
pub fn txn_reads(answer: &pb::TxnResponse) -> impl Iterator<Item = &[KeyValue]> {
    answer.responses.iter().filter_map(|op| match &op.response {
        Some(response_op::Response::ResponseRange(range)) => Some(range.kvs.as_slice()),
        _ => None,
    })
}

/// How many keys a transaction's deletes removed, over all its operations.
pub fn txn_deleted(answer: &pb::TxnResponse) -> i64 {
    answer
        .responses
        .iter()
        .filter_map(|op| match &op.response {
            Some(response_op::Response::ResponseDeleteRange(deleted)) => Some(deleted.deleted),
            _ => None,
        })
        .sum()
}

/// The etcd revision an answer was made at (0 without a header).
pub fn revision_of(header: Option<&pb::ResponseHeader>) -> i64 {
    header.map(|h| h.revision).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_prefix_is_its_last_byte_plus_one() {
        assert_eq!(prefix_end(b"shardalloc/blobs/"), b"shardalloc/blobs0".to_vec());
        assert_eq!(prefix_end(b"a\xff\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn comparisons_are_equalities_on_the_named_target() {
        let c = created_at("k", 7);
        assert_eq!(c.result, compare::CompareResult::Equal as i32);
        assert_eq!(c.target, compare::CompareTarget::Create as i32);
        assert_eq!(c.target_union, Some(compare::TargetUnion::CreateRevision(7)));
        assert_eq!(version_is("k", 0).target_union, Some(compare::TargetUnion::Version(0)));
        assert_eq!(value_is("k", "3").target_union, Some(compare::TargetUnion::Value(b"3".to_vec())));
    }

    #[test]
    fn a_transactions_reads_are_found_among_its_answers() {
        let kv = KeyValue { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() };
        let answer = pb::TxnResponse {
            header: Some(pb::ResponseHeader { revision: 9, ..Default::default() }),
            succeeded: false,
            responses: vec![
                pb::ResponseOp { response: Some(response_op::Response::ResponsePut(Default::default())) },
                pb::ResponseOp {
                    response: Some(response_op::Response::ResponseRange(pb::RangeResponse {
                        kvs: vec![kv.clone()],
                        ..Default::default()
                    })),
                },
            ],
        };
        let reads: Vec<&[KeyValue]> = txn_reads(&answer).collect();
        assert_eq!(reads, vec![std::slice::from_ref(&kv)]);
        assert_eq!(revision_of(answer.header.as_ref()), 9);
    }
}
