# sg-info --schedule ... --trace FILE writes valid Chrome-trace JSON (cmake -P):
# one thread-name record per stage, then one event per compute action.
#   -DPROG=sg-info -DOUT=file.json
execute_process(COMMAND ${PROG} --schedule pp=2,m=2,kind=zb-h1 --trace ${OUT}
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sg-info failed (${rc}): ${err}")
endif()
file(READ ${OUT} json)
string(JSON n LENGTH "${json}" traceEvents)
if(NOT n EQUAL 14) # 2 stages + 2 stages x 2 micro-batches x (F, B, W)
  message(FATAL_ERROR "expected 14 trace events, got ${n}")
endif()
# stage 1's last action: W of micro-batch 1 in slot 6 (1 slot = 1 ms)
string(JSON name GET "${json}" traceEvents 13 name)
string(JSON tid GET "${json}" traceEvents 13 tid)
string(JSON ts GET "${json}" traceEvents 13 ts)
if(NOT name STREQUAL "W1" OR NOT tid EQUAL 1 OR NOT ts EQUAL 6000)
  message(FATAL_ERROR "last event is ${name} on thread ${tid} at ${ts}, expected W1, 1, 6000")
endif()
message(STATUS "ok: ${n} events")
