/* bench/nothing.c: a process that exits at once, with no libc and no
   dynamic loader: what bench/spawn.c itself adds to every subject. */
void _start(void) {
    __asm__ volatile("mov $60, %eax\n\txor %edi, %edi\n\tsyscall");
}
