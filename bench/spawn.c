/* bench/spawn.c: the one spawner every timed subject of bench/run goes through.

   spawn PLAN

   PLAN is a text file (bench/spawner.py writes it):
     rounds N          timed rounds
     warmup N          untimed rounds first
     quiet MS          milliseconds of nothing before each action (0: none)
     subject NAME      a subject; the lines below it, up to the next subject:
     cleanenv          its environment starts empty (else: this process's)
     noquiet           no quiet before it (a floor that leaves nothing behind)
     env KEY=VALUE     set in its environment
     run ARG<TAB>ARG   one process, spawned and waited; a subject's runs go
                       one after another and are timed together. `%n` in an
                       argument is the round's number (warm-up rounds too),
                       `%o` the first line the last `runout` printed.
     runout ARG<TAB>.. the same, its stdout read (a line: `eukhe new`'s id)

   Each round runs every subject once, in the plan's order (A B A B), each
   process by posix_spawn and wait4, its stdout and stdin /dev/null. For
   each timed round and subject it prints `ROUND NANOSECONDS CPU NAME`: the
   wall time, and the CPU (user and system) its processes used themselves,
   from wait4, which other work on the machine moves far less. A
   process that fails (exit status not 0) ends it with status 2, saying
   which. Kept in C and this small so that what it adds to every subject
   is the same and can be measured: `nothing` (a process that exits at
   once) is timed through it like any other. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_SUBJECTS 16
#define MAX_RUNS 4
#define MAX_ARGS 32

struct subject {
    char name[128];
    char **env;
    int runs;
    int noquiet;
    int read_output[MAX_RUNS];
    char *argv[MAX_RUNS][MAX_ARGS + 1];
};

static struct subject subjects[MAX_SUBJECTS];
static int subject_count;
static char last_output[256];

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "spawn: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

/* An environment: this process's, each KEY=VALUE of the plan over it. */
static char **with_env(char **env, const char *assignment) {
    size_t key = strcspn(assignment, "=");
    int n = 0;
    while (env[n]) n++;
    char **out = calloc(n + 2, sizeof *out);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!(strncmp(env[i], assignment, key) == 0 && env[i][key] == '='))
            out[k++] = env[i];
    out[k++] = strdup(assignment);
    out[k] = NULL;
    return out;
}

static void read_plan(const char *path, int *rounds, int *warmup, int *quiet_ms) {
    FILE *plan = fopen(path, "r");
    if (!plan) fail("cannot open the plan", path);
    char line[8192];
    struct subject *s = NULL;
    while (fgets(line, sizeof line, plan)) {
        line[strcspn(line, "\n")] = 0;
        char *value = strchr(line, ' ');
        if (!value) value = line + strlen(line);
        else *value++ = 0;
        if (!*line) continue;
        if (!strcmp(line, "rounds")) *rounds = atoi(value);
        else if (!strcmp(line, "warmup")) *warmup = atoi(value);
        else if (!strcmp(line, "quiet")) *quiet_ms = atoi(value);
        else if (!strcmp(line, "subject")) {
            if (subject_count == MAX_SUBJECTS) fail("too many subjects", NULL);
            s = &subjects[subject_count++];
            snprintf(s->name, sizeof s->name, "%s", value);
            s->env = environ;
        } else if (!strcmp(line, "noquiet") && s) {
            s->noquiet = 1;
        } else if (!strcmp(line, "cleanenv") && s) {
            s->env = calloc(1, sizeof *s->env);
        } else if (!strcmp(line, "env") && s) {
            s->env = with_env(s->env, value);
        } else if ((!strcmp(line, "run") || !strcmp(line, "runout")) && s) {
            if (s->runs == MAX_RUNS) fail("too many runs in a subject", s->name);
            int a = 0;
            for (char *arg = strtok(strdup(value), "\t"); arg; arg = strtok(NULL, "\t")) {
                if (a == MAX_ARGS) fail("too many arguments", value);
                s->argv[s->runs][a++] = arg;
            }
            s->argv[s->runs][a] = NULL;
            s->read_output[s->runs] = !strcmp(line, "runout");
            s->runs++;
        } else fail("a line the plan cannot have", line);
    }
    fclose(plan);
}

/* argv with `%n` replaced by the round's number, `%o` by the last output. */
static void expand(char **argv, char **out, char *buffer, size_t size, int round) {
    int i = 0;
    for (; argv[i]; i++) {
        char *mark = strstr(argv[i], "%n");
        char *output = strstr(argv[i], "%o");
        if (!mark && !output) { out[i] = argv[i]; continue; }
        int used;
        if (mark)
            used = snprintf(buffer, size, "%.*s%d%s", (int)(mark - argv[i]), argv[i], round, mark + 2);
        else
            used = snprintf(buffer, size, "%.*s%s%s", (int)(output - argv[i]), argv[i], last_output,
                            output + 2);
        out[i] = buffer;
        buffer += used + 1;
        size -= used + 1;
    }
    out[i] = NULL;
}

/* Runs a subject's processes in turn; returns the CPU they used, in ns. */
static long long run_subject(struct subject *s, posix_spawn_file_actions_t *actions, int round) {
    long long cpu = 0;
    for (int r = 0; r < s->runs; r++) {
        char *argv[MAX_ARGS + 1], buffer[4096];
        expand(s->argv[r], argv, buffer, sizeof buffer, round);
        pid_t pid;
        int output[2] = {-1, -1};
        posix_spawn_file_actions_t reading;
        posix_spawn_file_actions_t *these = actions;
        if (s->read_output[r]) {
            if (pipe2(output, O_CLOEXEC)) fail("pipe", NULL);
            posix_spawn_file_actions_init(&reading);
            posix_spawn_file_actions_addopen(&reading, 0, "/dev/null", O_RDONLY, 0);
            posix_spawn_file_actions_adddup2(&reading, output[1], 1);
            these = &reading;
        }
        int error = posix_spawn(&pid, argv[0], these, NULL, argv, s->env);
        if (error) fail(strerror(error), argv[0]);
        if (s->read_output[r]) {
            close(output[1]);
            ssize_t got, have = 0;
            while ((got = read(output[0], last_output + have, sizeof last_output - 1 - have)) > 0)
                have += got;
            last_output[have] = 0;
            last_output[strcspn(last_output, "\n")] = 0;
            close(output[0]);
            posix_spawn_file_actions_destroy(&reading);
        }
        int status;
        struct rusage usage;
        if (wait4(pid, &status, 0, &usage) != pid) fail("wait4", argv[0]);
        cpu += (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000000LL +
               (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000LL;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "spawn: %s (subject %s, round %d) ended with status %d\n",
                    argv[0], s->name, round, status);
            exit(2);
        }
    }
    return cpu;
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: spawn PLAN", NULL);
    int rounds = 0, warmup = 0, quiet_ms = 0;
    read_plan(argv[1], &rounds, &warmup, &quiet_ms);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    struct timespec quiet = {quiet_ms / 1000, (long)(quiet_ms % 1000) * 1000000L};
    for (int round = 0; round < warmup + rounds; round++) {
        for (int i = 0; i < subject_count; i++) {
            if (quiet_ms && !subjects[i].noquiet) nanosleep(&quiet, NULL);
            long long start = now_ns();
            long long cpu = run_subject(&subjects[i], &actions, round);
            long long took = now_ns() - start;
            if (round >= warmup)
                printf("%d %lld %lld %s\n", round - warmup, took, cpu, subjects[i].name);
        }
        fflush(stdout);
    }
    return 0;
}
