/*
 * ringfloor: the message rate a single-producer ring in shared memory
 * allows between CPU 1 (producer) and CPU 0 (consumer), with no libfabric
 * and no provider in it: the floor under gnix's shm wire for a stream of
 * small messages.
 *
 * The ring is laid out as the shm wire lays out its mailbox rings
 * (provider/nic/shm/mailbox.rs): DEPTH slots of STRIDE bytes, each
 * starting with a sequence word that the producer writes last (release)
 * and the consumer polls (acquire); the consumer copies the message out
 * and hands the slot back by raising a head word, which the producer
 * reads only when the ring looks full (once a lap). Each message is
 * MSG bytes, sequence word included.
 *
 *   ringfloor STRIDE MSG N [DEPTH]
 *       e.g. ringfloor 8256 56 5000000   (gnix's default slot, 8 B payload)
 *            ringfloor 16 16 5000000 256 (messages packed four to a line)
 *   WORK=W ringfloor ...  each side also runs W empty loop iterations a
 *       message (about 0.9 ns each on the 2026-12 hosts), standing in
 *       for the path around the ring: it shows how much the ring's layout
 *       still matters once a message costs each side W of work.
 * Prints: RINGFLOOR stride=<bytes> msg=<bytes> depth=<n> work=<W> mmsgs=<rate>
 *
 * Build: cc -O2 -o ringfloor ringfloor.c
 */
#include "pin.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The stand-in for the path around the ring: W iterations the compiler
 * cannot drop (the empty asm is a compiler barrier). */
static void work(long w)
{
	for (long i = 0; i < w; i++)
		__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: ringfloor STRIDE MSG N [DEPTH]\n");
		return 2;
	}
	size_t stride = strtoul(argv[1], NULL, 0), msg = strtoul(argv[2], NULL, 0);
	long n = atol(argv[3]);
	size_t depth = argc > 4 ? strtoul(argv[4], NULL, 0) : 64;
	long w = getenv("WORK") ? atol(getenv("WORK")) : 0;
	if (msg < 8 || msg > 256 || msg > stride || stride % 8 || depth < 2 || n < 1) {
		fprintf(stderr, "ringfloor: 8 <= MSG <= min(STRIDE, 256), STRIDE a multiple of 8, DEPTH >= 2\n");
		return 2;
	}
	/* The head word on a page of its own, then the slots. */
	char *m = mmap(NULL, 4096 + depth * stride, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	uint64_t *head = (uint64_t *)m;
	char *ring = m + 4096;
	pid_t child = fork();
	if (child == 0) {
		pin(1);
		uint64_t seen = 0;
		char body[256];
		memset(body, 7, sizeof body);
		for (long p = 0; p < n; p++) {
			while ((uint64_t)p >= seen + depth)
				seen = __atomic_load_n(head, __ATOMIC_ACQUIRE);
			char *s = ring + (p % depth) * stride;
			work(w);
			memcpy(s + 8, body, msg - 8);
			__atomic_store_n((uint64_t *)s, (uint64_t)p + 1, __ATOMIC_RELEASE);
		}
		_exit(0);
	}
	pin(0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	char out[256];
	unsigned sum = 0;
	for (long p = 0; p < n; p++) {
		char *s = ring + (p % depth) * stride;
		while (__atomic_load_n((uint64_t *)s, __ATOMIC_ACQUIRE) != (uint64_t)p + 1)
			;
		memcpy(out, s + 8, msg - 8);
		work(w);
		sum += msg > 8 ? (unsigned char)out[0] : 7;
		__atomic_store_n(head, (uint64_t)p + 1, __ATOMIC_RELEASE);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waitpid(child, NULL, 0);
	double t = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	printf("RINGFLOOR stride=%zu msg=%zu depth=%zu work=%ld mmsgs=%.2f\n", stride, msg, depth, w, n / t / 1e6);
	return sum == (unsigned)(7 * n) ? 0 : 1;
}
