/* A libcupti whose every entry point aborts the process: proves the agent
 * calls nothing in libcupti when it must not (e.g. without libcuda). */
#include <stdlib.h>
#define DIE(name) int name() { abort(); }
DIE(cuptiGetVersion) DIE(cuptiSubscribe) DIE(cuptiActivityEnable) DIE(cuptiActivityDisable)
DIE(cuptiActivityRegisterCallbacks) DIE(cuptiActivityFlushAll) DIE(cuptiActivityGetNextRecord)
DIE(cuptiActivityGetNumDroppedRecords) DIE(cuptiGetTimestamp) DIE(cuptiSetThreadIdType)
