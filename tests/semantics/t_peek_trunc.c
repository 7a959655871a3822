// SPDX-License-Identifier: MIT
// recv with MSG_PEEK|MSG_TRUNC on TCP: tells how many bytes a read would
// take, copying none of them (the buffer may even be NULL), and consumes
// nothing; MSG_TRUNC alone discards them.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char buf[32];
	int c, s;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	T_REPORT("MSG_PEEK|MSG_TRUNC on empty",
		 recv(s, NULL, 5, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT));
	t_send_all(c, "hello world", 11);
	t_wait_inq(s, 11);
	T_REPORT("MSG_PEEK|MSG_TRUNC, NULL buffer, 5", recv(s, NULL, 5, MSG_PEEK | MSG_TRUNC));
	T_REPORT("MSG_PEEK|MSG_TRUNC, NULL buffer, 50", recv(s, NULL, 50, MSG_PEEK | MSG_TRUNC));
	memset(buf, '.', sizeof(buf));
	T_REPORT("MSG_PEEK|MSG_TRUNC into a buffer", recv(s, buf, sizeof(buf), MSG_PEEK | MSG_TRUNC));
	printf("the buffer is %s\n", buf[0] == '.' ? "untouched" : "written");
	T_REPORT_DATA("MSG_PEEK", recv(s, buf, 5, MSG_PEEK), buf);
	T_REPORT("MSG_TRUNC, NULL buffer, 6", recv(s, NULL, 6, MSG_TRUNC));
	T_REPORT_DATA("recv", recv(s, buf, sizeof(buf), 0), buf);
	close(c);
	close(s);
	return t_finish();
}
