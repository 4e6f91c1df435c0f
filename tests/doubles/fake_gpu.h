/* The one fake GPU both doubles describe: fake_cuda.c answers device queries
 * with these values and fake_cupti.c puts the same ones in DEVICE records, so
 * a test can join the two the way the agent joins cuDeviceGetUuid with
 * CUpti_ActivityDevice.uuid. */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H

#define FAKE_GPU_NAME "Fake GPU"
/* 16 fixed bytes; device N>0 gets byte 15 xor N. */
#define FAKE_GPU_UUID_INIT                                                     \
    {0x47, 0x50, 0x55, 0x2d, 0xfa, 0xce, 0x00, 0x01,                           \
     0x9e, 0x7a, 0x13, 0x37, 0x00, 0x00, 0x00, 0x00}
#define FAKE_GPU_SM_COUNT 132
#define FAKE_GPU_CC_MAJOR 9
#define FAKE_GPU_CC_MINOR 0
#define FAKE_GPU_TOTAL_MEM (80ull << 30)
#define FAKE_GPU_PCI_BUS 0x1b
#define FAKE_GPU_PCI_DEVICE 0
#define FAKE_GPU_PCI_DOMAIN 0

#endif
