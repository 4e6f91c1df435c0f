#!/usr/bin/env python3
"""Generate tests/doubles/cupti_layouts.h for the fake libcupti.

Every number in the generated header comes from a measured or generated
source, never from memory:

  * record sizes and field offsets: layout_v<ver>.json (gdb `ptype /o` of the
    real CUPTI headers shipped in the PyPI wheels), one file per version;
  * which struct each activity kind uses per version: kind_to_struct.md
    (the header's own enum documentation), whose first row also gives each
    wheel's cuptiGetVersion() value;
  * activity-kind numbers, CUptiResult codes and CUPTI_ACTIVITY_KIND_COUNT:
    the bindgen output cupti-sys/src/bindings_v13.rs / bindings_v12.rs.

Usage:
  gen_layouts.py [--layouts DIR] [--bindings DIR] [--check] [-o OUT]

DIR defaults: $CUPTI_LAYOUTS_DIR or /work/shared/research/cupti-layouts;
<repo>/cupti-sys/src. --check regenerates into memory and exits 1 if the
committed header differs (the JSON tables live outside the repository, so
build.sh uses the committed header and never needs python).

A kind whose struct is not in a version's JSON table (e.g. OVERHEAD and DEVICE
in 12.0, whose Overhead/Device4 structs were not measured) gets size 0 for that
version: the fake refuses to emit it and cuptiActivityGetNextRecord treats it
as unknown.
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))

# kind_to_struct.md row name -> CUPTI_ACTIVITY_KIND_<name>
KIND_ROWS = None  # all rows of the table are used

# Field families the fake writes. For each family, every listed field must
# have the same offset and size in every struct of the family in every version
# that has it; the generator fails otherwise.
FAMILIES = {
    "KERNEL": (r"CUpti_ActivityKernel\d+", [
        "kind", "cacheConfig", "sharedMemoryConfig", "registersPerThread",
        "start", "end", "completed", "deviceId", "contextId", "streamId",
        "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread",
        "localMemoryTotal", "correlationId", "gridId", "name", "queued",
        "submitted", "launchType", "sharedMemoryExecuted", "graphNodeId",
        "graphId", "channelID", "channelType", "clusterX", "clusterY",
        "clusterZ", "localMemoryTotal_v2", "isDeviceLaunched", "priority"]),
    "MEMCPY": (r"CUpti_ActivityMemcpy\d+", [
        "kind", "copyKind", "srcKind", "dstKind", "flags", "bytes", "start",
        "end", "deviceId", "contextId", "streamId", "correlationId",
        "runtimeCorrelationId", "graphNodeId", "graphId", "channelID",
        "channelType", "copyCount"]),
    "MEMSET": (r"CUpti_ActivityMemset\d+", [
        "kind", "value", "bytes", "start", "end", "deviceId", "contextId",
        "streamId", "correlationId", "flags", "memoryKind", "graphNodeId",
        "graphId"]),
    "P2P": (r"CUpti_ActivityMemcpyPtoP\d+", [
        "kind", "copyKind", "srcKind", "dstKind", "flags", "bytes", "start",
        "end", "deviceId", "contextId", "streamId", "srcDeviceId",
        "srcContextId", "dstDeviceId", "dstContextId", "correlationId",
        "graphNodeId", "graphId"]),
    "API": (r"CUpti_ActivityAPI", [
        "kind", "cbid", "start", "end", "processId", "threadId",
        "correlationId", "returnValue"]),
    "SYNC": (r"CUpti_ActivitySynchronization\d*", [
        "kind", "type", "start", "end", "correlationId", "contextId",
        "streamId", "cudaEventId", "cudaEventSyncId", "returnValue"]),
    "GRAPH": (r"CUpti_ActivityGraphTrace2", [
        "kind", "correlationId", "start", "end", "deviceId", "graphId",
        "contextId", "streamId", "endDeviceId", "endContextId"]),
    "OVERHEAD": (r"CUpti_ActivityOverhead3", [
        "kind", "overheadKind", "objectKind", "objectId", "start", "end",
        "correlationId", "overheadData"]),
    "DEVICE": (r"CUpti_ActivityDevice[56]", [
        "kind", "flags", "globalMemoryBandwidth", "globalMemorySize",
        "numThreadsPerWarp", "numMultiprocessors", "maxThreadsPerBlock",
        "computeCapabilityMajor", "computeCapabilityMinor", "id", "uuid",
        "name", "isCudaVisible", "isMigEnabled"]),
    "EXTCORR": (r"CUpti_ActivityExternalCorrelation", [
        "kind", "externalKind", "externalId", "correlationId"]),
}


def parse_kind_table(path):
    rows = [l for l in open(path) if "|" in l]
    head = [c.strip() for c in rows[0].split("|")]
    versions = []
    for col in head[1:]:
        m = re.match(r"(?:c_(\d+\.\d+)\.\d+|cupti(\d+))\((\d+)\)", col)
        if not m:
            sys.exit(f"unparsed column {col!r}")
        versions.append((m.group(1), int(m.group(3))))
    table = {}
    for r in rows[1:]:
        cells = [c.strip() for c in r.split("|")]
        table[cells[0]] = cells[1:]
    return versions, table


def parse_consts(path, prefix):
    out = {}
    for m in re.finditer(r"pub const (%s[A-Za-z0-9_]*): \w+ = (-?\d+);" % prefix,
                         open(path).read()):
        out[m.group(1)] = int(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", default=os.environ.get(
        "CUPTI_LAYOUTS_DIR", "/work/shared/research/cupti-layouts"))
    ap.add_argument("--bindings", default=os.path.join(REPO, "cupti-sys", "src"))
    ap.add_argument("-o", "--out", default=os.path.join(HERE, "cupti_layouts.h"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    versions, ktable = parse_kind_table(os.path.join(a.layouts, "kind_to_struct.md"))
    # Column i of the table is layout_v<label>.json; the "cupti12"/"cupti13"
    # columns are the newest wheel of that major, whose JSON name we find by
    # elimination.
    jsons = sorted(f[len("layout_v"):-len(".json")] for f in os.listdir(a.layouts)
                   if f.startswith("layout_v") and f.endswith(".json"))
    labels = []
    for (label, api) in versions:
        if label is None:
            major = "12" if api < 100000 else "13"
            cands = [j for j in jsons if j.startswith(major + ".") and j not in
                     [v for v, _ in versions if v]]
            if len(cands) != 1:
                sys.exit(f"cannot map column api={api} to a json: {cands}")
            label = cands[0]
        labels.append((label, api))
    layouts = {l: json.load(open(os.path.join(a.layouts, f"layout_v{l}.json")))
               for l, _ in labels}

    b13 = os.path.join(a.bindings, "bindings_v13.rs")
    b12 = os.path.join(a.bindings, "bindings_v12.rs")
    kinds = parse_consts(b13, "CUPTI_ACTIVITY_KIND_")
    kc12 = parse_consts(b12, "CUPTI_ACTIVITY_KIND_COUNT")["CUPTI_ACTIVITY_KIND_COUNT"]
    kc13 = kinds["CUPTI_ACTIVITY_KIND_COUNT"]
    results = parse_consts(b13, "CUPTI_")
    results = {k: v for k, v in results.items()
               if (k == "CUPTI_SUCCESS" or k.startswith("CUPTI_ERROR_"))
               and k != "CUPTI_ERROR_FORCE_INT"}
    misc = {}
    for name in ["CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000",
                 "CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel",
                 "CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000",
                 "CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER",
                 "CUPTI_ACTIVITY_ATTR_ENABLE_HES",
                 "CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH",
                 "CUPTI_ACTIVITY_OBJECT_THREAD",
                 "CUPTI_ACTIVITY_OBJECT_DEVICE",
                 "CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION",
                 "CUPTI_ACTIVITY_MEMORY_KIND_DEVICE",
                 "CUPTI_ACTIVITY_MEMORY_KIND_PINNED",
                 "CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE",
                 "CUPTI_ACTIVITY_MEMCPY_KIND_PTOP",
                 "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE",
                 "CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT",
                 "CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM",
                 "CUPTI_ACTIVITY_THREAD_ID_TYPE_SIZE",
                 "CUPTI_ACTIVITY_ATTR_COUNT",
                 "CUPTI_ACTIVITY_FLAG_FLUSH_FORCED",
                 "CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2"]:
        c = parse_consts(b13, name)
        if name not in c:
            sys.exit(f"{name} not in {b13}")
        misc[name] = c[name]
    max_kind = max(v for k, v in kinds.items() if k != "CUPTI_ACTIVITY_KIND_FORCE_INT")

    L = []
    w = L.append
    w("/* GENERATED by tests/doubles/gen_layouts.py -- do not edit.")
    w(" * Sources: %s/{layout_v*.json,kind_to_struct.md} (sizes/offsets measured" % a.layouts)
    w(" * from the real CUPTI headers), cupti-sys/src/bindings_v1{2,3}.rs (enum values).")
    w(" * Size 0 = the struct for that kind/version is not in the measured tables. */")
    w("#ifndef FAKE_CUPTI_LAYOUTS_H")
    w("#define FAKE_CUPTI_LAYOUTS_H")
    w("#include <stdint.h>")
    w("")
    for k, v in sorted(results.items(), key=lambda kv: kv[1]):
        w(f"#define FC_{k} {v}")
    w("")
    w("static const struct { int code; const char *name; } FC_RESULT_NAMES[] = {")
    for k, v in sorted(results.items(), key=lambda kv: kv[1]):
        w(f'    {{{v}, "{k}"}},')
    w("};")
    w("")
    for k, v in sorted(kinds.items(), key=lambda kv: kv[1]):
        if k.endswith("FORCE_INT") or k.endswith("_COUNT"):
            continue
        w(f"#define FC_{k} {v}u")
    w(f"#define FC_KIND_COUNT_V12 {kc12}u /* CUPTI_ACTIVITY_KIND_COUNT, 12.9 bindings */")
    w(f"#define FC_KIND_COUNT_V13 {kc13}u /* CUPTI_ACTIVITY_KIND_COUNT, 13.5 bindings */")
    w(f"#define FC_KIND_SLOTS {max_kind + 1 + 4}u")
    for k, v in misc.items():
        w(f"#define FC_{k} {v}u")
    w("")

    # Per-family offsets, checked for consistency everywhere they appear.
    for fam, (pat, fields) in FAMILIES.items():
        rx = re.compile(pat + "$")
        for fname in fields:
            seen = set()
            for l, _ in labels:
                for sname, s in layouts[l].items():
                    if not rx.match(sname):
                        continue
                    for (n, off, sz) in s["fields"]:
                        if n == fname:
                            seen.add((off, sz))
            if len(seen) != 1:
                sys.exit(f"{fam}.{fname}: offsets differ or missing: {seen}")
            off, sz = seen.pop()
            w(f"#define FC_OFF_{fam}_{fname} {off} /* {sz} bytes */")
    w("")

    w("struct fc_layout_version {")
    w("    const char *label;        /* \"13.5\" */")
    w("    uint32_t api_version;     /* what cuptiGetVersion returns for this wheel */")
    w("    uint32_t major;")
    w("    uint32_t kind_count;      /* CUPTI_ACTIVITY_KIND_COUNT of that major */")
    w("    uint16_t size[FC_KIND_SLOTS];          /* record size per kind, 0 = unknown */")
    w("    const char *struct_name[FC_KIND_SLOTS];")
    w("};")
    w("")
    w("static const struct fc_layout_version FC_LAYOUTS[] = {")
    for i, (l, api) in enumerate(labels):
        major = int(l.split(".")[0])
        sizes, names = [], []
        for row, cells in ktable.items():
            kname = "CUPTI_ACTIVITY_KIND_" + row
            if kname not in kinds:
                sys.exit(f"unknown kind row {row}")
            sname = cells[i]
            if sname == "n/a":
                continue
            st = layouts[l].get(sname)
            if st is None:
                continue  # struct not measured for this version -> size 0
            sizes.append(f"[{kinds[kname]}] = {st['size']}")
            names.append(f'[{kinds[kname]}] = "{sname}"')
        w(f'    {{"{l}", {api}u, {major}u, {"FC_KIND_COUNT_V12" if major == 12 else "FC_KIND_COUNT_V13"},')
        w("     {" + ", ".join(sizes) + "},")
        w("     {" + ", ".join(names) + "}},")
    w("};")
    w("#define FC_NUM_LAYOUTS (sizeof FC_LAYOUTS / sizeof FC_LAYOUTS[0])")
    w("")
    w("#endif")
    text = "\n".join(L) + "\n"
    if a.check:
        old = open(a.out).read() if os.path.exists(a.out) else ""
        if old != text:
            print(f"{a.out} is stale; rerun gen_layouts.py", file=sys.stderr)
            sys.exit(1)
        print("cupti_layouts.h up to date")
        return
    open(a.out, "w").write(text)
    print(f"wrote {a.out}: {len(labels)} versions: " + ", ".join(f"{l}({v})" for l, v in labels))


if __name__ == "__main__":
    main()
