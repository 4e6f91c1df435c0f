#!/usr/bin/env python3
"""Decode gputrace Perfetto exports with the official Perfetto schema.

Usage: check_perfetto.py FILE.pftrace...

Needs the PyPI packages `perfetto` (which ships the compiled
perfetto_trace.proto descriptor) and `protobuf`:

    pip install perfetto protobuf

Checks, per file: the bytes parse as perfetto.protos.Trace; no message at
any depth has fields unknown to the schema; the sequence starts with
SEQ_INCREMENTAL_STATE_CLEARED and every TrackEvent packet has
SEQ_NEEDS_INCREMENTAL_STATE; every event's track was described and every
interned iid resolves; slices begin and end in balance per track; each
flow id starts once and terminates once. Exits non-zero on the first
failure.
"""
import sys

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    from google.protobuf.unknown_fields import UnknownFieldSet
    from google.protobuf.descriptor import FieldDescriptor
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}; install with: pip install perfetto protobuf")
    sys.exit(0)


def is_repeated(field):
    # protobuf >= 6 has `is_repeated`; older releases only `label`.
    if hasattr(field, "is_repeated"):
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


def no_unknown_fields(msg, path):
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        nums = sorted({f.field_number for f in unknown})
        raise AssertionError(f"{path}: fields unknown to the schema: {nums}")
    for field, value in msg.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if is_repeated(field):
            for i, v in enumerate(value):
                no_unknown_fields(v, f"{path}.{field.name}[{i}]")
        else:
            no_unknown_fields(value, f"{path}.{field.name}")


def check(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    no_unknown_fields(trace, "trace")
    packets = trace.packet
    assert packets, "no packets"
    assert packets[0].sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED, "first packet must clear incremental state"
    tracks, names, cats, arg_names = {}, {}, {}, {}
    depth, flows_out, flows_in = {}, set(), set()
    counts = {"slices": 0, "instants": 0, "counters": 0}
    for i, p in enumerate(packets):
        if p.HasField("interned_data"):
            for e in p.interned_data.event_names:
                names[e.iid] = e.name
            for e in p.interned_data.event_categories:
                cats[e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                arg_names[e.iid] = e.name
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            assert td.uuid not in tracks, f"packet {i}: track {td.uuid:x} described twice"
            if td.HasField("parent_uuid"):
                assert td.parent_uuid in tracks, f"packet {i}: parent of {td.uuid:x} not described yet"
            tracks[td.uuid] = td
        if p.HasField("track_event"):
            te = p.track_event
            assert p.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE, f"packet {i}: flags {p.sequence_flags}"
            assert te.track_uuid in tracks, f"packet {i}: track {te.track_uuid:x} not described"
            if te.type in (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_INSTANT):
                assert te.name_iid in names, f"packet {i}: name iid {te.name_iid} not interned"
                for c in te.category_iids:
                    assert c in cats, f"packet {i}: category iid {c} not interned"
                for a in te.debug_annotations:
                    assert a.name_iid in arg_names, f"packet {i}: annotation name iid {a.name_iid} not interned"
            if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                depth[te.track_uuid] = depth.get(te.track_uuid, 0) + 1
                counts["slices"] += 1
            elif te.type == pb.TrackEvent.TYPE_SLICE_END:
                depth[te.track_uuid] = depth.get(te.track_uuid, 0) - 1
                assert depth[te.track_uuid] >= 0, f"packet {i}: slice end without begin"
            elif te.type == pb.TrackEvent.TYPE_INSTANT:
                counts["instants"] += 1
            elif te.type == pb.TrackEvent.TYPE_COUNTER:
                assert tracks[te.track_uuid].HasField("counter"), f"packet {i}: counter value on a non-counter track"
                assert te.HasField("double_counter_value"), f"packet {i}: counter without a value"
                counts["counters"] += 1
            else:
                raise AssertionError(f"packet {i}: unexpected type {te.type}")
            for fid in te.flow_ids:
                assert fid not in flows_out, f"flow {fid:x} starts twice"
                flows_out.add(fid)
            for fid in te.terminating_flow_ids:
                assert fid not in flows_in, f"flow {fid:x} ends twice"
                flows_in.add(fid)
        if p.HasField("clock_snapshot"):
            ids = {c.clock_id for c in p.clock_snapshot.clocks}
            assert {1, 6} <= ids, f"clock snapshot lacks REALTIME/BOOTTIME: {ids}"
    open_slices = {t: d for t, d in depth.items() if d}
    assert not open_slices, f"slices never ended on {len(open_slices)} tracks"
    assert flows_out == flows_in, f"{len(flows_out ^ flows_in)} unmatched flow ids"
    print(f"{path}: ok: {len(packets)} packets, {len(tracks)} tracks, {counts['slices']} slices, "
          f"{counts['instants']} instants, {counts['counters']} counter values, {len(flows_out)} flows, {len(names)} interned names")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for f in sys.argv[1:]:
        try:
            check(f)
        except AssertionError as e:
            print(f"{f}: FAILED: {e}")
            sys.exit(1)
