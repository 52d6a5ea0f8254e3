"""asyncio tasks stuck on each other, for python_stacks_test.

Tasks "alpha" and "beta" await each other (a cycle); "orphan" awaits a future
nothing else refers to; "held" awaits a future kept in a global (someone
could still set it); "parent" awaits a gather of "child-1" and "child-2",
which sleep; on 3.11+ "group" waits for the TaskGroup of "member-1" and
"member-2", which sleep too. The loop then idles in epoll_wait. With --block
the main task finally calls time.sleep() inside the loop (a blocked loop).
The READY line (N: every task, the main one included):
  READY pid=P tid=T alpha_line=L1 beta_line=L2 orphan_line=L3 py_minor=M tasks=N
Runs on CPython 3.8 and later (3.8 syntax); the task graph is read from 3.11.
"""
import asyncio
import os
import sys
import threading
import time

from markers import line_of

HELD = []
# Tasks are kept here: asyncio holds only weak references to them, and a task
# whose future nothing refers to is otherwise garbage.
TASKS = []


async def alpha(other):
    await asyncio.sleep(0)
    await other[0]  # AWAIT-ALPHA


async def beta(other):
    await asyncio.sleep(0)
    await other[0]  # AWAIT-BETA


async def orphan():
    fut = asyncio.get_running_loop().create_future()
    await fut  # AWAIT-ORPHAN


async def held():
    fut = asyncio.get_running_loop().create_future()
    HELD.append(fut)
    await fut


async def child():
    await asyncio.sleep(3600)


async def parent():
    await asyncio.gather(
        asyncio.create_task(child(), name="child-1"), asyncio.create_task(child(), name="child-2")
    )


async def group():
    async with asyncio.TaskGroup() as tg:
        tg.create_task(child(), name="member-1")
        tg.create_task(child(), name="member-2")


async def main():
    a_box, b_box = [], []
    a = asyncio.create_task(alpha(b_box), name="alpha")
    b = asyncio.create_task(beta(a_box), name="beta")
    a_box.append(a)
    b_box.append(b)
    TASKS.extend([a, b])
    TASKS.append(asyncio.create_task(orphan(), name="orphan"))
    TASKS.append(asyncio.create_task(held(), name="held"))
    TASKS.append(asyncio.create_task(parent(), name="parent"))
    if sys.version_info >= (3, 11):
        TASKS.append(asyncio.create_task(group(), name="group"))
    for _ in range(5):
        await asyncio.sleep(0)
    print(
        "READY pid=%d tid=%d alpha_line=%d beta_line=%d orphan_line=%d py_minor=%d tasks=%d"
        % (
            os.getpid(),
            threading.get_native_id(),
            line_of("AWAIT-ALPHA", alpha),
            line_of("AWAIT-BETA", beta),
            line_of("AWAIT-ORPHAN", orphan),
            sys.version_info[1],
            len(asyncio.all_tasks()),
        ),
        flush=True,
    )
    if "--block" in sys.argv:
        time.sleep(3600)  # BLOCK-LOOP
    await asyncio.sleep(3600)


asyncio.run(main())
